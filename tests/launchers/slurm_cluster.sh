#!/usr/bin/env bash
# Starts a one-host Slurm cluster from Debian's packages (munge, slurmctld,
# slurmd) in a temporary directory, runs a command against it, and stops
# every daemon it started, also when the command or the start fails.
#
#   tests/launchers/slurm_cluster.sh run -- COMMAND ARGS...
#
# The command runs with SLURM_CONF pointing to the generated slurm.conf, so
# srun/sbatch/sinfo reach this cluster. Exits with the command's status, or
# 77 (skip) when the packages are missing or the daemons cannot run here
# (the reason and the daemons' log lines go to stderr).
set -uo pipefail

if [ "${1:-}" != run ] || [ "${2:-}" != -- ] || [ $# -lt 3 ]; then
  echo "usage: $0 run -- COMMAND ARGS..." >&2
  exit 2
fi
shift 2

for tool in munged slurmctld slurmd srun sinfo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)" >&2
    exit 77
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: the test cluster runs its daemons as root (SlurmUser=root); run as root" >&2
  exit 77
fi

tmp=$(mktemp -d /tmp/tutti-slurm.XXXXXX)
chmod 700 "$tmp"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

logs() {
  local f
  for f in "$tmp"/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log; do
    [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 25 "$f"; } >&2
  done
}
skip() {
  echo "SKIP: $*" >&2
  logs
  exit 77
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- munge --------------------------------------------------------------------
mkdir -p "$tmp/munge"
chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
munged -F --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munge/munged.seed" \
  >>"$tmp/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/munge/munge.socket" ] && break; sleep 0.05; done
[ -S "$tmp/munge/munge.socket" ] || skip "munged did not start"

# ---- slurm.conf ---------------------------------------------------------------
host=$(hostname -s)
cpus=$(nproc)
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$tmp/slurm.conf" <<CONF
ClusterName=tutti-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/builtin
PlugStackConfig=$tmp/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
: >"$tmp/plugstack.conf"
export SLURM_CONF="$tmp/slurm.conf"

# ---- the daemons ----------------------------------------------------------------
slurmctld -D -c -i -f "$SLURM_CONF" >>"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >>"$tmp/slurmd.out" 2>&1 &
pids+=($!)

state=""
for _ in $(seq 150); do
  state=$(sinfo -h -o %t 2>/dev/null | head -n 1)
  [ "$state" = idle ] && break
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { cat "$tmp"/*.out >&2 2>/dev/null; skip "a daemon (pid $p) exited at start"; }
  done
  sleep 0.1
done
[ "$state" = idle ] || { cat "$tmp"/*.out >&2 2>/dev/null; skip "the node did not become idle within 15 s (state '$state')"; }

# ---- the command ------------------------------------------------------------------
"$@"
rc=$?
[ $rc -eq 0 ] || logs
exit $rc
