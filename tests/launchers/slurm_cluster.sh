#!/usr/bin/env bash
# Starts a Slurm cluster from Debian's packages (munge, slurmctld, slurmd) in
# a temporary directory, runs a command against it, and stops every daemon it
# started, also when the command or the start fails.
#
#   tests/launchers/slurm_cluster.sh run [--netbed] -- COMMAND ARGS...
#
# Without --netbed: one node, this host (NodeAddr 127.0.0.1), and the
# command runs here. With --netbed, inside `netbed.sh run K -- ...`: one node
# per test host (NodeName its host name, NodeAddr its address), slurmctld on
# the first host, a slurmd on each (spool, pid and log files per node, %n),
# munged here (its socket is on the file system every host shares), and the
# command runs on the first host (netbed.sh exec), as a login shell on a
# cluster's head node would. The hosts resolve each other's names
# (netbed.sh's hosts file), as a cluster's nodes do.
#
# The command runs with SLURM_CONF pointing to the generated slurm.conf, so
# srun/sbatch/sinfo reach this cluster. Exits with the command's status, or
# 77 (skip) when the packages are missing or the daemons cannot run here
# (the reason and the daemons' log lines go to stderr).
set -uo pipefail

netbed=""
if [ "${1:-}" = run ] && [ "${2:-}" = --netbed ]; then
  netbed=$(cd "$(dirname "$0")/../netbed" && pwd)/netbed.sh
  set -- run "${@:3}"
fi
if [ "${1:-}" != run ] || [ "${2:-}" != -- ] || [ $# -lt 3 ]; then
  echo "usage: $0 run [--netbed] -- COMMAND ARGS..." >&2
  exit 2
fi
shift 2
if [ -n "$netbed" ]; then
  if [ -z "${NETBED_HOSTS:-}" ] || [ -z "${NETBED_ADDRS:-}" ]; then
    echo "$0 --netbed: run me inside 'netbed.sh run K -- ...'" >&2
    exit 2
  fi
  IFS=, read -ra nb_hosts <<<"$NETBED_HOSTS"
  IFS=, read -ra nb_addrs <<<"$NETBED_ADDRS"
fi

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
  for f in "$tmp"/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd*.log; do
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
# on HOST CMD...: runs CMD on a test host (--netbed), or here. For daemons
# started in the background, prefix HOST sets the array `prefix` instead
# (a function would run in a subshell, and $! would not be the daemon).
prefix() {
  prefix=()
  if [ -n "$netbed" ]; then prefix=(bash "$netbed" exec "$1"); fi
}
on() {
  prefix "$1"
  shift
  "${prefix[@]}" "$@"
}
cpus=$(nproc)
if [ -n "$netbed" ]; then
  host=${nb_hosts[0]}
  ctld_addr=${nb_addrs[0]}
  nodes=""
  node_lines=""
  for i in "${!nb_hosts[@]}"; do
    nodes+="${nodes:+,}${nb_hosts[$i]}"
    node_lines+="NodeName=${nb_hosts[$i]} NodeAddr=${nb_addrs[$i]} CPUs=$cpus State=UNKNOWN"$'\n'
  done
else
  host=$(hostname -s)
  ctld_addr=127.0.0.1
  nodes=$host
  node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN"$'\n'
fi
nnodes=$(printf '%s' "$node_lines" | grep -c '^NodeName=')
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$tmp/slurm.conf" <<CONF
ClusterName=tutti-test
SlurmctldHost=$host($ctld_addr)
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
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd-%n.log
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
${node_lines}PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
: >"$tmp/plugstack.conf"
export SLURM_CONF="$tmp/slurm.conf"

# ---- the daemons ----------------------------------------------------------------
# (netbed.sh exec replaces itself with the daemon: $! is the daemon.)
prefix "$host"
"${prefix[@]}" slurmctld -D -c -i -f "$SLURM_CONF" >>"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
if [ -n "$netbed" ]; then
  # slurmd (22.05) starts only with cgroup file systems at /sys/fs/cgroup
  # (a tmpfs, cgroup v1's layout) and /sys/fs/cgroup/systemd, even with no
  # cgroup plugin configured (proctrack/linuxproc, task/none); a test host has
  # none (ip netns exec mounts a sysfs of its own). Mount them as this machine
  # has them, in the host's own mount namespace (gone with it): a tmpfs, and
  # the named hierarchy "systemd" of this machine, where Slurm creates nothing
  # with these plugins.
  for h in "${nb_hosts[@]}"; do
    mkdir -p "$tmp/spool/$h"
    prefix "$h"
    "${prefix[@]}" sh -c 'mount -t tmpfs -o mode=755 tutti-netbed-cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
      mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd && exec slurmd -D -f "$0"' \
      "$SLURM_CONF" >>"$tmp/slurmd-$h.out" 2>&1 &
    pids+=($!)
  done
else
  mkdir -p "$tmp/spool/$host"
  slurmd -D -f "$SLURM_CONF" -N "$host" >>"$tmp/slurmd.out" 2>&1 &
  pids+=($!)
fi

# Every node idle: one line "idle N" from sinfo.
state=""
for _ in $(seq 150); do
  state=$(on "$host" sinfo -h -o '%t %D' 2>/dev/null | tr '\n' ' ')
  [ "$state" = "idle $nnodes " ] && break
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { cat "$tmp"/*.out >&2 2>/dev/null; skip "a daemon (pid $p) exited at start"; }
  done
  sleep 0.1
done
[ "$state" = "idle $nnodes " ] ||
  { cat "$tmp"/*.out >&2 2>/dev/null; skip "the $nnodes node(s) did not become idle within 15 s (sinfo: '$state')"; }

# ---- the command ------------------------------------------------------------------
on "$host" "$@"
rc=$?
[ $rc -eq 0 ] || logs
exit $rc
