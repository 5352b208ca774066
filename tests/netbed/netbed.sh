#!/usr/bin/env bash
# The network test-bed: K test hosts on this machine, each a network
# namespace with its own address, joined to a private bridge by a veth pair.
#
#   netbed.sh run K [--rate RATE] [--burst SIZE] -- COMMAND [ARGS...]
#       builds a test-bed of K hosts, runs COMMAND (here, outside the hosts)
#       with NETBED_* describing it, and tears everything down when COMMAND
#       ends, fails, or this script is interrupted; exits with COMMAND's code.
#   netbed.sh up NAME K [--rate RATE] [--burst SIZE]    build one and leave it up
#   netbed.sh down NAME                                 tear it down
#   netbed.sh exec HOST COMMAND [ARGS...]               run COMMAND on a host
#   netbed.sh check [--rate]                            exit 0 if a test-bed can be
#                                                       built here, else 77 and why
#   netbed.sh gc                                        remove test-beds whose
#                                                       creator is gone
#
# Hosts are named NAME-h0 .. NAME-h<K-1> (NAME: "nb<pid of the creator>" for
# `run`); host I has the address 198.18.0.<I+1>/24 (198.18.0.0/15 is
# reserved for benchmarking) on its interface eth0, and loopback. The bridge
# NAME-br has no address: nothing on it can reach this machine's own
# networks, or leave it.
#
# `exec` runs COMMAND in the host's network namespace and in new IPC, UTS and
# mount namespaces with the host's name as hostname and a /dev/shm of its
# own, so that tutti sees one host per namespace (it tells hosts apart by
# hostname, boot id and IPC namespace) and shared memory never crosses hosts.
# As on a cluster, every host resolves every host's name: /etc/hosts is,
# for COMMAND, a file of the test-bed's (/run/tutti-netbed/NAME.hosts:
# localhost and "198.18.0.<I+1> NAME-h<I>"), bind-mounted in its mount
# namespace. It replaces itself with COMMAND (exec all the way), so signals
# sent to it reach COMMAND. For tuttirun: --exec-prefix "bash netbed.sh exec {host}".
#
# --rate shapes every link in both directions with a token bucket
# (tc qdisc tbf; RATE as tc writes it: 100mbit, 1gbit, 10gbit), so a host
# sends and receives at most RATE. --burst sets the bucket (default: 10 ms
# of RATE, at least 64kb).
#
# In `run`, COMMAND sees:
#   NETBED_NAME    the test-bed's name
#   NETBED_HOSTS   host names, comma-separated (NAME-h0,NAME-h1,...)
#   NETBED_ADDRS   their addresses, comma-separated, in the same order
#   NETBED_MASTER  the address of the first host (198.18.0.1)
#   NETBED_PREFIX  an exec prefix for tuttirun: bash <this script> exec {host}
#
# Needs root, `ip` (iproute2), `unshare` and `mount` (util-linux), and `tc`
# with --rate. Exit code 77 means the test-bed cannot be built here (the
# reason is printed); test suites treat it as "skipped".
set -uo pipefail

SELF=$(readlink -f "$0")
NET_PREFIX=198.18.0
SKIP=77
HOSTS_DIR=/run/tutti-netbed  # NAME.hosts: the test-bed's /etc/hosts

die() { echo "netbed: $*" >&2; exit 1; }
skip() { echo "netbed: SKIPPED: $*" >&2; exit $SKIP; }

# Prints why a test-bed cannot be built here, or nothing.
why_not() {
  local need_tc=$1
  if [ "$EUID" != 0 ]; then echo "not root (network namespaces need root)"; return; fi
  for tool in ip unshare mount hostname; do
    command -v "$tool" >/dev/null 2>&1 || { echo "'$tool' is not installed"; return; }
  done
  if [ "$need_tc" = 1 ] && ! command -v tc >/dev/null 2>&1; then echo "'tc' is not installed (needed for --rate)"; return; fi
  local probe=nbprobe$$
  if ! ip netns add "$probe" 2>/dev/null; then echo "'ip netns add' fails here (no CAP_SYS_ADMIN?)"; return; fi
  if ! ip link add "$probe-a" type veth peer name "$probe-b" 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "'ip link add ... type veth' fails here (no veth support?)"
    return
  fi
  ip link del "$probe-a" 2>/dev/null
  if ! ip netns exec "$probe" unshare --ipc --uts --mount true 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "'unshare --ipc --uts --mount' fails inside a network namespace"
    return
  fi
  ip netns del "$probe" 2>/dev/null
}

valid_name() { [[ "$1" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "bad test-bed name '$1' (a-z0-9, at most 10 characters)"; }

# Bytes per second of a tc rate ("1gbit", "100mbit", "500kbit", "8bit").
rate_bytes() {
  local r=$1 n unit
  [[ "$r" =~ ^([0-9]+)([kmgt]?bit)$ ]] || die "--rate '$r': write it as N, Nkbit, Nmbit, Ngbit or Ntbit"
  n=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  case $unit in
    bit) echo $((n / 8)) ;; kbit) echo $((n * 1000 / 8)) ;; mbit) echo $((n * 1000000 / 8)) ;;
    gbit) echo $((n * 1000000000 / 8)) ;; tbit) echo $((n * 1000000000000 / 8)) ;;
  esac
}

namespaces_of() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-h[0-9]+$" || true; }

down() {
  local name=$1 ns pids
  valid_name "$name"
  for ns in $(namespaces_of "$name"); do
    # Every process still inside the host goes first; a namespace with
    # processes in it would outlive its name.
    for _ in 1 2 3 4 5; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -KILL $pids 2>/dev/null
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$name-br" 2>/dev/null
  rm -f "$HOSTS_DIR/$name.hosts"
  rmdir "$HOSTS_DIR" 2>/dev/null
  # veths whose namespace is gone are gone too; remove strays of a partial up.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$name-h[0-9]+$" || true); do
    ip link del "$link" 2>/dev/null
  done
  return 0
}

shape() {  # namespace or "", device, rate, burst
  local ns=$1 dev=$2 rate=$3 burst=$4
  if [ -n "$ns" ]; then
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
  else
    tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
  fi
}

up() {
  local name=$1 k=$2 rate=$3 burst=$4 i ns
  valid_name "$name"
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 254 ] || die "K must be 1 .. 254, got '$k'"
  if [ -n "$rate" ] && [ -z "$burst" ]; then
    local b
    b=$(( $(rate_bytes "$rate") / 100 ))
    [ "$b" -lt 65536 ] && b=65536
    burst=$b
  fi
  [ -n "$(namespaces_of "$name")" ] && die "a test-bed named '$name' exists already"
  mkdir -p "$HOSTS_DIR" || return 1
  {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    for ((i = 0; i < k; i++)); do printf '%s\t%s\n' "$NET_PREFIX.$((i + 1))" "$name-h$i"; done
  } >"$HOSTS_DIR/$name.hosts" || return 1
  ip link add "$name-br" type bridge || return 1
  ip link set "$name-br" up || return 1
  for ((i = 0; i < k; i++)); do
    ns=$name-h$i
    ip netns add "$ns" || return 1
    ip link add "$ns" type veth peer name eth0 netns "$ns" || return 1
    ip link set "$ns" master "$name-br" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$NET_PREFIX.$((i + 1))/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    if [ -n "$rate" ]; then
      shape "$ns" eth0 "$rate" "$burst" || return 1  # what the host sends
      shape "" "$ns" "$rate" "$burst" || return 1    # what it receives
    fi
  done
  # Wait until every host can reach the first one (the bridge learns at once,
  # but duplicate address detection and link state take a moment).
  for ((i = 1; i < k; i++)); do
    local ok=0
    for _ in $(seq 1 50); do
      if ip netns exec "$name-h$i" ping -c1 -W1 -q "$NET_PREFIX.1" >/dev/null 2>&1; then ok=1; break; fi
      command -v ping >/dev/null 2>&1 || { ok=1; break; }
      sleep 0.1
    done
    [ $ok = 1 ] || { echo "netbed: host $name-h$i cannot reach $NET_PREFIX.1" >&2; return 1; }
  done
  return 0
}

# Removes test-beds "nb<pid>" whose creator no longer runs (a run killed by
# SIGKILL cannot clean up after itself).
gc() {
  local seen name pid
  seen=$( (ip netns list 2>/dev/null | awk '{print $1}'; ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}'
    ls "$HOSTS_DIR" 2>/dev/null) | grep -oE '^nb[0-9]+' | sort -u)
  for name in $seen; do
    pid=${name#nb}
    if ! kill -0 "$pid" 2>/dev/null; then down "$name"; fi
  done
}

cmd_exec() {
  [ $# -ge 2 ] || die "usage: netbed.sh exec HOST COMMAND [ARGS...]"
  local host=$1
  shift
  [[ "$host" =~ ^[a-z][a-z0-9]*-h[0-9]+$ ]] || die "bad host name '$host'"
  local hosts_file=$HOSTS_DIR/${host%-h*}.hosts
  [ -f "$hosts_file" ] || hosts_file=""
  # Private mount propagation (unshare's default), so the /dev/shm and
  # /etc/hosts mounted here are seen by this host's processes only and
  # vanish with them.
  exec ip netns exec "$host" unshare --ipc --uts --mount \
    sh -c 'mount -t tmpfs -o mode=1777,size=50% tutti-netbed-shm /dev/shm && hostname "$0" &&
           { [ -z "$1" ] || mount --bind "$1" /etc/hosts; } && shift && exec "$@"' "$host" "$hosts_file" "$@"
}

cmd_run() {
  local k="" rate="" burst=""
  [ $# -ge 1 ] || die "usage: netbed.sh run K [--rate RATE] [--burst SIZE] -- COMMAND [ARGS...]"
  k=$1
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --burst) burst=$2; shift 2 ;;
      --) shift; break ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  [ $# -ge 1 ] || die "no command given"
  [ -n "$rate" ] && rate_bytes "$rate" >/dev/null
  local why
  why=$(why_not "$([ -n "$rate" ] && echo 1 || echo 0)")
  [ -n "$why" ] && skip "$why"

  NAME=nb$$
  CHILD=""
  cleanup() {
    trap - EXIT INT TERM HUP
    if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; fi
    down "$NAME"
  }
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  gc
  if ! up "$NAME" "$k" "$rate" "$burst"; then
    echo "netbed: building the test-bed failed" >&2
    exit 1
  fi
  local hosts="" addrs="" i
  for ((i = 0; i < k; i++)); do
    hosts+="${hosts:+,}$NAME-h$i"
    addrs+="${addrs:+,}$NET_PREFIX.$((i + 1))"
  done
  echo "netbed: $k hosts up ($hosts${rate:+, links shaped to $rate})" >&2
  # In the background, so that a signal to this script is handled at once.
  # A background command of a script starts with SIGINT and SIGQUIT
  # ignored; give it the defaults back (when env can), as in the foreground.
  local restore=()
  env --default-signal=INT true 2>/dev/null && restore=(env --default-signal=INT,QUIT)
  NETBED_NAME=$NAME NETBED_HOSTS=$hosts NETBED_ADDRS=$addrs NETBED_MASTER=$NET_PREFIX.1 \
    NETBED_PREFIX="bash $SELF exec {host}" "${restore[@]}" "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=""
  exit $rc
}

[ $# -ge 1 ] || die "usage: netbed.sh run|up|down|exec|check|gc ..."
sub=$1
shift
case $sub in
  run) cmd_run "$@" ;;
  exec) cmd_exec "$@" ;;
  up)
    [ $# -ge 2 ] || die "usage: netbed.sh up NAME K [--rate RATE] [--burst SIZE]"
    name=$1 k=$2 rate="" burst=""
    shift 2
    while [ $# -gt 0 ]; do
      case $1 in
        --rate) rate=$2; shift 2 ;;
        --burst) burst=$2; shift 2 ;;
        *) die "unknown option '$1'" ;;
      esac
    done
    why=$(why_not "$([ -n "$rate" ] && echo 1 || echo 0)")
    [ -n "$why" ] && skip "$why"
    up "$name" "$k" "$rate" "$burst" || { down "$name"; die "building the test-bed failed"; }
    ;;
  down) [ $# -eq 1 ] || die "usage: netbed.sh down NAME"; down "$1" ;;
  check)
    why=$(why_not "$([ "${1:-}" = --rate ] && echo 1 || echo 0)")
    [ -n "$why" ] && skip "$why"
    echo "netbed: a test-bed can be built here"
    ;;
  gc) gc ;;
  *) die "unknown command '$sub'" ;;
esac
