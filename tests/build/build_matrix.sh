#!/usr/bin/env bash
# Builds what users link and run -- the library, its tools and the Python
# package with the torch backend (against .venv's torch) -- warnings as
# errors (TUTTI_WERROR=ON, as in our own builds; a user's build has it OFF):
# g++ in Release and Debug, clang++ in Release.
# The other builds stand for the rest: RelWithDebInfo is the plain stage's
# g++ build; clang's warnings come from its front end, the same at every
# optimization level, and no source of what users build depends on NDEBUG
# (checked below), so clang's Release build also stands for its
# RelWithDebInfo and Debug builds (its Debug build took 115 s of the
# matrix's 565), while g++'s Debug build checks that everything links
# without optimization. The tests themselves build in the plain stage and
# under the sanitizers.
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
# What the builds above stand for holds only while no source reads NDEBUG
# (assert included): where one does, clang's Debug build belongs here again.
if grep -rnE '\bNDEBUG\b|(^|[^_[:alnum:]])assert[[:space:]]*\(' src include tools python/src examples bench \
     --include='*.cc' --include='*.h' --include='*.c'; then
  echo "build_matrix: the sources above depend on NDEBUG; add clang++ Debug to the matrix" >&2
  exit 1
fi
for build in g++:Release g++:Debug clang++:Release; do
  cxx=${build%%:*}
  cfg=${build#*:}
  dir=$out/$cxx-$cfg
  start=$(date +%s)
  if ! { cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$cfg" -DTUTTI_WERROR=ON \
           -DTUTTI_REQUIRE_TORCH=ON -DTUTTI_PYTHON_EXECUTABLE="${TUTTI_VENV:-$PWD/.venv}/bin/python" \
           -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=ON -DTUTTI_BUILD_TOOLS=ON >/dev/null &&
         cmake --build "$dir" -j"$jobs" >"$dir.log" 2>&1; }; then
    tail -n 60 "$dir.log" 2>/dev/null || true
    echo "build_matrix: $cxx $cfg failed (log: $dir.log)" >&2
    exit 1
  fi
  echo "build_matrix: $cxx $cfg built in $(( $(date +%s) - start )) s"
done
