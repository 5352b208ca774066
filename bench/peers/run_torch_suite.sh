#!/usr/bin/env bash
# The torch.distributed comparison behind docs/performance.md ("tutti as a
# torch.distributed backend"): the same torch_bench.py loop with backend
# "gloo" and backend "tutti", alternating, median of 3; all_reduce, broadcast
# and all_gather (all_gather_into_tensor with tutti) on 2 and 4 ranks; 8 B ..
# 64 KiB with 200 iterations, 1 .. 16 MiB with 20. Copies the tables and plots
# into docs/perf/torch/. Needs the build's Python package (build/python) and
# a quiet machine; takes about 6 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/peers/results-torch
mkdir -p docs/perf/torch
for coll in all_reduce broadcast all_gather; do
  for n in 2 4; do
    /usr/bin/python3 bench/peers/compare.py "$coll" "$n" -b 8 -e 64K -f 2 -n 200 -w 20 --reps 3 \
      --systems torch-gloo,torch-tutti --out "$out/small" || true
    /usr/bin/python3 bench/peers/compare.py "$coll" "$n" -b 1M -e 16M -f 4 -n 20 -w 5 --reps 3 \
      --systems torch-gloo,torch-tutti --out "$out/large" || true
    for part in small large; do
      for ext in md png; do
        cp "$out/$part/${coll}_n$n.$ext" "docs/perf/torch/${coll}_n${n}_$part.$ext" 2>/dev/null || true
      done
    done
  done
done
