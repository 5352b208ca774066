#!/usr/bin/env bash
# Builds the peer benchmarks into build/peers/ (run bench/peers/setup.sh first):
#   build/peers/mpi_bench_openmpi   mpi_bench.c with mpicc.openmpi (Open MPI 4.1)
#   build/peers/mpi_bench_mpich     mpi_bench.c with mpicc.mpich   (MPICH 4.0)
#   build/peers/gloo_bench          gloo_bench.cc with g++, -lgloo (Debian's libgloo-dev)
# -O2, as tutti's RelWithDebInfo build. One compiler at a time.
# Rebuilds only what is older than its sources. Usage: build.sh [OUTDIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/peers}
mkdir -p "$out"
CFLAGS=${CFLAGS:-"-O2 -g -Wall -Wextra"}
CXXFLAGS=${CXXFLAGS:-"-O2 -g -Wall -Wextra -std=c++17"}

stale() {  # stale TARGET SOURCES...: whether TARGET is missing or older than a source
  local t=$1; shift
  [[ -e "$t" ]] || return 0
  for s in "$@"; do [[ "$s" -nt "$t" ]] && return 0; done
  return 1
}

for impl in openmpi mpich; do
  t="$out/mpi_bench_$impl"
  if stale "$t" "$here/mpi_bench.c" "$here/peer_common.h" "$here/build.sh"; then
    echo "build.sh: mpicc.$impl -> $t"
    # shellcheck disable=SC2086
    "mpicc.$impl" $CFLAGS -std=gnu11 -o "$t" "$here/mpi_bench.c" -lm
  fi
done

t="$out/gloo_bench"
if stale "$t" "$here/gloo_bench.cc" "$here/peer_common.h" "$here/build.sh" "$root/tools/tuttirun/placement.cc" \
    "$root/tools/tuttirun/placement.h"; then
  echo "build.sh: g++ -> $t"
  # libgloo.so is in /usr/lib; with ibverbs and redis support it needs
  # libibverbs and hiredis at run time (pulled in by libgloo-dev's dependencies).
  # shellcheck disable=SC2086
  g++ $CXXFLAGS -I"$root/tools/tuttirun" -o "$t" "$here/gloo_bench.cc" "$root/tools/tuttirun/placement.cc" \
    -L/usr/lib -lgloo -pthread -lm
fi
echo "build.sh: up to date in $out"
