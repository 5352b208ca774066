#!/usr/bin/env bash
# The seed tour under the launchers clusters already run, with no tutti
# variables set: every rank's output is checked by check_seed_tour.py.
#
#   tests/launchers/launcher_test.sh slurm|openmpi|mpich SEED_TOUR
#
# Exits 77 (skip) when the launcher is not installed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../examples/check_seed_tour.py
mode=$1
tour=$2
source "$here/common.sh"

case $mode in
  slurm)
    need srun
    # Inside the cluster: the tour on 4 tasks, then a stale RANK in a step,
    # which must fail at once naming both launchers' variables.
    exec "$here/slurm_cluster.sh" run -- bash -c '
      set -u
      python3 "$1" --run 4 -- srun -n 4 --overcommit --label --time=2 "$2" || exit 1
      out=$(RANK=3 WORLD_SIZE=2 timeout 60 srun -n 2 --overcommit --label --time=1 "$2" 2>&1)
      rc=$?
      want="RANK=3, WORLD_SIZE=2 (torchrun) disagrees with SLURM_PROCID=0, SLURM_NTASKS=2 (Slurm)"
      if [ $rc -eq 0 ] || ! grep -qF "$want" <<<"$out"; then
        echo "a stale RANK in an srun step: expected a failure naming \"$want\", got exit $rc:" >&2
        echo "$out" >&2
        exit 1
      fi
      echo "a stale RANK in an srun step fails at init: $(grep -F -m1 "$want" <<<"$out")"
      # The sbatch script of docs/launching.md, with the tour on 4 tasks.
      log=$(mktemp -d /tmp/tutti-sbatch.XXXXXX)
      trap "rm -rf $log" EXIT
      SEED_TOUR="$2" timeout 90 sbatch --wait --overcommit --output="$log/out" "$3" >/dev/null || {
        cat "$log/out" >&2; echo "the sbatch script failed" >&2; exit 1; }
      python3 "$1" --run 4 -- cat "$log/out"
    ' _ "$check" "$tour" "$here/seed_tour.sbatch"
    ;;
  openmpi)
    need mpirun.openmpi
    mpirun=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 --mca btl_tcp_if_include lo
      --mca oob_tcp_if_include lo -x TUTTI_LOG -x TUTTI_TIMEOUT)
    # Through mpirun's PMIx server; then, with TUTTI_PMIX=0, through the file.
    TUTTI_LOG=debug python3 "$check" --run 4 --logs "rendezvous through PMIx" -- "${mpirun[@]}" "$tour" || exit 1
    TUTTI_LOG=debug TUTTI_PMIX=0 exec python3 "$check" --run 4 --logs "rendezvous through the file /tmp/tutti-rendezvous-" \
      -- "${mpirun[@]}" -x TUTTI_PMIX "$tour"
    ;;
  mpich)
    need mpiexec.mpich
    exec python3 "$check" --run 4 -- mpiexec.mpich -launcher fork -np 4 "$tour"
    ;;
  *)
    echo "unknown launcher $mode" >&2
    exit 2
    ;;
esac
