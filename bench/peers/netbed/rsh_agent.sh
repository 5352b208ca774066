#!/usr/bin/env bash
# Open MPI's rsh agent on the test-bed: "rsh_agent.sh [-opts] ADDRESS COMMAND..." runs COMMAND
# (a shell string, as ssh would) on the test host with that address (NETBED_ADDRS/NETBED_HOSTS).
set -euo pipefail
while [[ "${1:-}" == -* ]]; do shift; done
addr=$1; shift
IFS=, read -ra A <<< "$NETBED_ADDRS"; IFS=, read -ra H <<< "$NETBED_HOSTS"
host=
for i in "${!A[@]}"; do [ "${A[$i]}" = "$addr" ] && host=${H[$i]}; done
[ -n "$host" ] || { echo "rsh_agent: no test host has address $addr" >&2; exit 1; }
exec bash "$(dirname "$0")/../../../tests/netbed/netbed.sh" exec "$host" sh -c "$*"
