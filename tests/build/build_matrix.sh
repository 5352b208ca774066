#!/usr/bin/env bash
# Builds what users link and run -- the library, its tools and the Python
# package -- with g++ and clang++ in the Release and Debug configurations,
# warnings as errors (TUTTI_WERROR=ON, as in our own builds; a user's build
# has it OFF). RelWithDebInfo is the plain stage's g++ build; clang's
# warnings come from its front end, the same at every optimization level,
# so its Release build (NDEBUG, as RelWithDebInfo) stands for that too. The
# tests themselves build in the plain stage and under the sanitizers.
#
#   tests/build/build_matrix.sh [DIR]   (DIR: where the builds go, default build-matrix)
#
# Each configuration is a fresh CMake build of its own (kept between runs,
# so a second run only rebuilds what changed). Exits non-zero at the first
# configuration that fails, naming it.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-matrix}
jobs=${TUTTI_JOBS:-$(nproc)}
for cxx in g++ clang++; do
  for cfg in Release Debug; do
    dir=$out/$cxx-$cfg
    start=$(date +%s)
    if ! { cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$cfg" -DTUTTI_WERROR=ON \
             -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=ON -DTUTTI_BUILD_TOOLS=ON >/dev/null &&
           cmake --build "$dir" -j"$jobs" >"$dir.log" 2>&1; }; then
      tail -n 60 "$dir.log" 2>/dev/null || true
      echo "build_matrix: $cxx $cfg failed (log: $dir.log)" >&2
      exit 1
    fi
    echo "build_matrix: $cxx $cfg built in $(( $(date +%s) - start )) s"
  done
done
