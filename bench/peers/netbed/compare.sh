#!/usr/bin/env bash
# tutti and Open MPI side by side on the network test-bed, alternating.
# Run it inside a test-bed, e.g. 4 hosts with links shaped to 1 Gbit/s:
#   bash tests/netbed/netbed.sh run 4 --rate 1gbit -- bench/peers/netbed/compare.sh
# Environment: PER (ranks per host, 1), COLL (all_reduce), MINB (8), MAXB (16M),
# F (8), ITERS (5), WARM (1), REPS (2); VARIANTS adds tutti runs with settings
# of their own, "name=VAR=value VAR2=value;name2=...", printed as tutti-name;
# BUILDS adds runs of other builds of tutti, "name=DIR;..." (DIR holds
# bin/tuttirun and bin/tutti-bench), printed as tutti-name: a change's before
# and after side by side. OPENMPI=0 leaves Open MPI out. TUTTIRUN_ARGS go to
# every tuttirun (e.g. "--bind-to none").
# Prints "size time_us algbw busbw wrong" rows per run; bench/peers/netbed/report.py
# turns saved output into a table and a plot.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
IFS=, read -ra H <<< "$NETBED_HOSTS"; IFS=, read -ra A <<< "$NETBED_ADDRS"
per=${PER:-1}
hosts=$(printf "%s:$per," "${H[@]}"); hosts=${hosts%,}
mpi_hosts=$(printf "%s:$per," "${A[@]}"); mpi_hosts=${mpi_hosts%,}
args="${COLL:-all_reduce} -b ${MINB:-8} -e ${MAXB:-16M} -f ${F:-8} -n ${ITERS:-5} -w ${WARM:-1} -c 1"
# Both place ranks alike: tuttirun binds each host's local rank i to CPU i
# (one rank per host keeps every CPU), as Open MPI's core binding does.
mpi_bind=none; [ "$per" -gt 1 ] && mpi_bind=core:overload-allowed
IFS=';' read -ra variants <<< "${VARIANTS:-}"
IFS=';' read -ra builds <<< "${BUILDS:-}"
runs=("")
for v in "${variants[@]}"; do runs+=("v:$v"); done
for b in "${builds[@]}"; do runs+=("b:$b"); done
[ "${OPENMPI:-1}" = 0 ] || runs+=("openmpi")
for rep in $(seq "${REPS:-2}"); do
  # The order of the systems rotates from one repetition to the next.
  k=$(( (rep - 1) % ${#runs[@]} ))
  for v in "${runs[@]:k}" "${runs[@]:0:k}"; do
    if [ "$v" = openmpi ]; then
      echo "== openmpi rep $rep"
      bash "$root/tests/netbed/netbed.sh" exec "${H[0]}" env NETBED_ADDRS="$NETBED_ADDRS" NETBED_HOSTS="$NETBED_HOSTS" \
        mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to "$mpi_bind" -np $(( ${#H[@]} * per )) --host "$mpi_hosts" \
        --mca plm_rsh_agent "$root/tests/netbed/ssh_agent.sh" --mca mpi_yield_when_idle 1 \
        --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        "$root/build/peers/mpi_bench_openmpi" $args 2>&1 | awk '/^ +[0-9]/ {print $1, $6, $7, $8, $9}'
      continue
    fi
    name=tutti; settings=(); dir=$root/build
    case "$v" in
      v:*) v=${v#v:}; name=tutti-${v%%=*}; read -ra settings <<< "${v#*=}" ;;
      b:*) v=${v#b:}; name=tutti-${v%%=*}; dir=${v#*=} ;;
    esac
    echo "== $name rep $rep"
    # shellcheck disable=SC2086
    env ${settings[@]+"${settings[@]}"} "$dir/bin/tuttirun" ${TUTTIRUN_ARGS:-} --hosts "$hosts" --exec-prefix "$NETBED_PREFIX" \
      --master-addr "$NETBED_MASTER" "$dir/bin/tutti-bench" $args 2>&1 | awk '/^ +[0-9]/ {print $1, $6, $7, $8, $9}'
  done
done
