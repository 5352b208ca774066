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
# Nothing of another launch may leak in: no MASTER_ADDR, no rank variables.
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TUTTI_LAUNCHER \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS TUTTI_JOB_SECRET
export TUTTI_TIMEOUT=30

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "SKIP: $1 is not installed (scripts/setup.sh installs it)" >&2; exit 77; }
}

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
    exec python3 "$check" --run 4 -- mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 \
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$tour"
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
