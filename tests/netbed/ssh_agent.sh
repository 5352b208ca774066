#!/usr/bin/env bash
# An ssh stand-in on the test-bed, for launchers that start their daemons
# through ssh (Open MPI's --mca plm_rsh_agent, hydra's -launcher-exec):
#
#   ssh_agent.sh [-OPTION...] HOST COMMAND...
#
# runs COMMAND on the test host HOST (a host name, NAME-h<I>, or one of
# NETBED_ADDRS) through netbed.sh exec. As ssh does, COMMAND's words are
# joined with spaces and run by sh -c. ssh's options before HOST are
# skipped (-o, -p, -l, -i, -F with their values). Unlike ssh, COMMAND
# inherits this process's environment.
set -euo pipefail
while [[ "${1:-}" == -* ]]; do
  case $1 in
    -o | -p | -l | -i | -F) shift 2 ;;
    *) shift ;;
  esac
done
[ $# -ge 2 ] || { echo "ssh_agent: usage: ssh_agent.sh [-OPTION...] HOST COMMAND..." >&2; exit 255; }
host=$1
shift
if [[ "$host" =~ ^[0-9.]+$ ]]; then
  IFS=, read -ra A <<<"${NETBED_ADDRS:-}"
  IFS=, read -ra H <<<"${NETBED_HOSTS:-}"
  name=
  for i in "${!A[@]}"; do [ "${A[$i]}" = "$host" ] && name=${H[$i]}; done
  [ -n "$name" ] || { echo "ssh_agent: no test host has address $host (NETBED_ADDRS=${NETBED_ADDRS:-})" >&2; exit 255; }
  host=$name
fi
exec bash "$(dirname "$0")/netbed.sh" exec "$host" sh -c "$*"
