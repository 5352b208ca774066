#!/usr/bin/env bash
# Start-up on one host: init, a barrier and one 8-byte all_reduce (checked),
# timed from the launcher's start to its end, for tutti (tuttirun), Open MPI
# (mpirun) and MPICH (mpiexec) in rotating order; prints every run and the
# medians. Each system runs with the placement compare.py gives it, Open MPI
# yielding when idle (its setting for more ranks than cores).
#   bench/startup/run.sh [RANKS ...]       default: 64 128 256
#   REPS (3), SYSTEMS (tutti,openmpi,mpich), TIMEOUT (seconds per run, 900)
# Needs build/bin/tuttirun and build/bin/tutti-startup (cmake --build build
# --target tuttirun tutti-startup) and the MPIs (bench/peers/setup.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build/peers
mkdir -p "$out"
for impl in openmpi mpich; do
  t=$out/startup_mpi_$impl
  if [ ! -e "$t" ] || [ "$root/bench/startup/startup_mpi.c" -nt "$t" ]; then
    "mpicc.$impl" -O2 -Wall -Wextra -o "$t" "$root/bench/startup/startup_mpi.c" || exit 1
  fi
done
ranks=("$@"); [ ${#ranks[@]} -eq 0 ] && ranks=(64 128 256)
IFS=, read -ra systems <<< "${SYSTEMS:-tutti,openmpi,mpich}"
reps=${REPS:-3}
limit=${TIMEOUT:-900}
# Raise the open-file limit to its hard limit: a rank of a full mesh holds a
# socket per peer.
ulimit -n "$(ulimit -Hn)"

launch() {  # system n
  case $1 in
    tutti) "$root/build/bin/tuttirun" -n "$2" "$root/build/bin/tutti-startup" ;;
    openmpi) OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo mpirun.openmpi --allow-run-as-root \
      --oversubscribe --bind-to core:overload-allowed --mca mpi_yield_when_idle 1 -np "$2" "$out/startup_mpi_openmpi" ;;
    mpich) mpiexec.mpich -launcher fork -bind-to core -np "$2" "$out/startup_mpi_mpich" ;;
  esac
}

declare -A times
echo "# start-up: init + barrier + 8 B all_reduce; $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC'); $reps repetitions"
for n in "${ranks[@]}"; do
  for rep in $(seq "$reps"); do
    k=$(( (rep - 1) % ${#systems[@]} ))
    for s in "${systems[@]:k}" "${systems[@]:0:k}"; do
      t0=$(date +%s.%N)
      outp=$(timeout -k 10 "$limit" bash -c "$(declare -f launch); root='$root' out='$out' launch $s $n" 2>&1)
      rc=$?
      t1=$(date +%s.%N)
      secs=$(echo "$t1 - $t0" | bc -l)
      if [ $rc -ne 0 ] || ! grep -q "startup ok: $n ranks" <<< "$outp"; then
        echo "run $s n=$n rep=$rep: FAILED (exit $rc) after ${secs} s"; tail -5 <<< "$outp" | sed 's/^/    | /'
        secs=failed
      else
        printf "run %s n=%d rep=%d: %.2f s\n" "$s" "$n" "$rep" "$secs"
      fi
      times[$s,$n]+="$secs "
      # Let the previous job's processes and sockets go before the next.
      sleep 2
    done
  done
done
python3 - "${ranks[*]}" "${systems[*]}" <<PY
import statistics, sys
ranks = sys.argv[1].split(); systems = sys.argv[2].split()
times = {}
$(for k in "${!times[@]}"; do echo "times['$k'] = '${times[$k]}'.split()"; done)
print()
print("| ranks | " + " | ".join(f"{s} (s)" for s in systems) + " |")
print("|---:|" + "---:|" * len(systems))
prev = {}
for n in ranks:
    cells = []
    for s in systems:
        runs = times.get(f"{s},{n}", [])
        ok = [float(x) for x in runs if x != "failed"]
        if not ok:
            cells.append("failed")
            continue
        m = statistics.median(ok)
        growth = f", ×{m / prev[s]:.1f}" if s in prev else ""
        prev[s] = m
        bad = len(runs) - len(ok)
        cells.append(f"{m:.2f} ({len(ok)} runs{growth}" + (f"; {bad} failed" if bad else "") + ")")
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
