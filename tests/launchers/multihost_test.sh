#!/usr/bin/env bash
# The seed tour across the hosts of the network test-bed (tests/netbed), two
# ranks per host, started by the launchers clusters run, with no MASTER_ADDR
# and no tutti variables: the ranks find each other as they would on a
# cluster (docs/launching.md). Run inside a test-bed:
#
#   netbed.sh run 4 -- tests/launchers/multihost_test.sh mpich|openmpi|slurm SEED_TOUR
#
# For each launcher: first a placement job (every rank prints its launcher
# rank and hostname: ranks 2I and 2I+1 must run on host I), then the tour,
# every rank's lines checked by check_seed_tour.py, and every rank must
# report a job of 8 ranks on 4 hosts ("joined: ... on 4 host(s)").
#
#   mpich    mpiexec.mpich on the first host, its proxies started on the
#            others through ssh_agent.sh (-launcher ssh -launcher-exec);
#            rank 0's address travels through hydra's PMI.
#   openmpi  mpirun.openmpi on the first host, its daemons started through
#            ssh_agent.sh (plm_rsh_agent); rank 0's address through PMIx.
#            TUTTI_RENDEZVOUS_DIR is /dev/shm, which is each host's own, so
#            the file cannot help; and with TUTTI_PMIX=0 the job must fail
#            waiting for that file (the directory really is not shared).
#   slurm    a cluster of one slurmd per host (slurm_cluster.sh --netbed);
#            srun -N 4 -n 8 on the first host; the ranks meet on the first
#            host of SLURM_STEP_NODELIST at the port derived from the job
#            and step ids; then the docs' sbatch script on 4 nodes.
#
# Exits 77 (skip) when the launcher is not installed, or (slurm_cluster.sh)
# when Slurm's daemons cannot start here; netbed.sh run exits 77 when the
# test-bed cannot be built. slurm-on-the-cluster is the part of the slurm
# test that runs on the cluster's first host.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../examples/check_seed_tour.py
netbed=$here/../netbed/netbed.sh
agent=$here/../netbed/ssh_agent.sh
mode=$1
tour=$2
source "$here/common.sh"
if [ -z "${NETBED_HOSTS:-}" ]; then
  echo "run me inside 'netbed.sh run K -- ...'" >&2
  exit 2
fi
IFS=, read -ra H <<<"$NETBED_HOSTS"
IFS=, read -ra A <<<"$NETBED_ADDRS"
k=${#H[@]}
per=2
n=$((k * per))

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# placement LAUNCH...: LAUNCH sh -c 'echo place RANK HOSTNAME' (RANK the
# launcher's variable named by $rank_var) must put rank R on host R/per.
placement() {
  local out r want got bad=""
  out=$(timeout 60 "$@" sh -c "echo place \$$rank_var \$(hostname)" 2>&1) || {
    echo "$out" >&2
    fail "the placement job failed: $*"
  }
  for ((r = 0; r < n; r++)); do
    want=${H[r / per]}
    got=$(sed -n "s/^.*place $r \([^ ]*\)\$/\1/p" <<<"$out" | head -n 1)
    [ "$got" = "$want" ] || bad+="rank $r on '${got}', expected $want; "
  done
  [ -z "$bad" ] || { echo "$out" >&2; fail "placement: $bad"; }
  echo "placement: $n ranks, $per on each of the $k hosts ($rank_var, hostname)"
}

case $mode in
  mpich)
    need mpiexec.mpich
    rank_var=PMI_RANK
    launch=(bash "$netbed" exec "${H[0]}" mpiexec.mpich -launcher ssh -launcher-exec "$agent" -hosts "$NETBED_HOSTS"
      -ppn "$per" -np "$n")
    placement "${launch[@]}"
    TUTTI_LOG=info exec python3 "$check" --run "$n" --hosts "$k" -- timeout 60 "${launch[@]}" "$tour"
    ;;
  openmpi)
    need mpirun.openmpi
    rank_var=OMPI_COMM_WORLD_RANK
    hosts=$(printf "%s:$per," "${A[@]}")
    launch=(bash "$netbed" exec "${H[0]}" mpirun.openmpi --allow-run-as-root --bind-to none -np "$n"
      --host "${hosts%,}" --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0
      -x TUTTI_LOG -x TUTTI_TIMEOUT -x TUTTI_RENDEZVOUS_DIR=/dev/shm)
    placement "${launch[@]}"
    TUTTI_LOG=debug python3 "$check" --run "$n" --hosts "$k" --logs "rendezvous through PMIx" \
      -- timeout 60 "${launch[@]}" "$tour" || exit 1
    # Without PMIx the per-host directory cannot carry the address.
    start=$SECONDS
    out=$(TUTTI_PMIX=0 TUTTI_TIMEOUT=3 timeout 60 "${launch[@]}" -x TUTTI_PMIX "$tour" 2>&1)
    rc=$?
    want="Timed out waiting for rank 0's rendezvous file /dev/shm/tutti-rendezvous-"
    if [ $rc -eq 0 ] || ! grep -qF "$want" <<<"$out"; then
      echo "$out" >&2
      fail "with TUTTI_PMIX=0 and a directory of each host's own, expected a failure naming the file, got exit $rc"
    fi
    echo "TUTTI_PMIX=0: the ranks off rank 0's host wait in vain for the file, exit $rc after $((SECONDS - start)) s"
    ;;
  slurm)
    need srun
    # The cluster runs the rest of this script on its first host.
    exec "$here/slurm_cluster.sh" run --netbed -- bash "$here/multihost_test.sh" slurm-on-the-cluster "$tour"
    ;;
  slurm-on-the-cluster)
    rank_var=SLURM_PROCID
    placement srun -N "$k" -n "$n" --label --time=1
    TUTTI_LOG=debug python3 "$check" --run "$n" --hosts "$k" --logs "rendezvous at ${H[0]}:" \
      --logs "(the first host of SLURM_STEP_NODELIST=${NETBED_NAME}-h[0-$((k - 1))], port derived from SLURM_JOB_ID=" \
      -- timeout 60 srun -N "$k" -n "$n" --label --time=2 "$tour" ||
      exit 1
    # The sbatch script of docs/launching.md, on every node; its output
    # file holds the ranks' stdout and stderr.
    log=$(mktemp -d /tmp/tutti-sbatch.XXXXXX)
    trap 'rm -rf "$log"' EXIT
    SEED_TOUR=$tour TUTTI_LOG=info timeout 90 sbatch --wait -N "$k" --ntasks "$n" --output="$log/out" \
      "$here/seed_tour.sbatch" >/dev/null || { cat "$log/out" >&2; fail "the sbatch script failed"; }
    python3 "$check" --run "$n" --hosts "$k" -- sh -c 'cat "$0"; cat "$0" >&2' "$log/out"
    ;;
  *)
    echo "unknown launcher $mode" >&2
    exit 2
    ;;
esac
