#!/usr/bin/env bash
# Runs the side-by-side comparisons behind docs/performance.md and copies
# their tables and plots into docs/perf/. Needs a quiet machine: every other
# job on these cores shows up in the figures. Takes about 25-35 minutes.
# Sizes up to 8 KiB are timed over 2,000 iterations, up to 512 KiB over 200,
# larger ones over 20 (compare.py --tiers); with more ranks than cores over
# 200 and 50, as MPICH and Gloo then take milliseconds per operation.
#   bench/peers/run_suite.sh [full|quick] [FIRST]   FIRST: start at that run ("all_reduce 8")
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/peers/results
mkdir -p docs/perf
reps=3
max=256M
[ "${1:-}" = quick ] && { reps=1; max=16M; }
[ "${1:-}" = full ] || [ "${1:-}" = quick ] || [ -z "${1:-}" ] || { echo "usage: run_suite.sh [full|quick] [FIRST]" >&2; exit 2; }
first=${2:-}
run() {  # coll n systems max
  if [ -n "$first" ]; then
    [ "$first" = "$1 $2" ] || return 0
    first=
  fi
  local tiers=8K:2000,512K:200
  [ "$2" -gt "$(nproc)" ] && tiers=8K:200,512K:50
  python3 bench/peers/compare.py "$1" "$2" -b 8 -e "$4" -f 4 -n 20 -w 5 --tiers "$tiers" --reps "$reps" --systems "$3" --out "$out" || true
  cp "$out/$1_n$2.md" "$out/$1_n$2.png" docs/perf/ 2>/dev/null || true
}
all=tutti,openmpi,mpich,gloo,torch-gloo
run all_reduce 2 "$all" "$max"
run all_reduce 4 "$all" "$max"
# MPICH busy-polls: with 8 ranks on 2 cores it takes 10-30 ms per operation,
# so it is left out of the oversubscribed run.
run all_reduce 8 tutti,openmpi,gloo,torch-gloo 64M
for coll in broadcast all_gather reduce_scatter all_to_all; do
  for n in 2 4; do run "$coll" "$n" "$all" 64M; done
done
