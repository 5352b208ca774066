#!/usr/bin/env bash
# Configures and builds tutti into build/ (or $TUTTI_BUILD_DIR), with
# $TUTTI_JOBS parallel jobs (default: one per core), warnings as errors (our
# own builds; TUTTI_WERROR is off in a user's).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=${TUTTI_BUILD_DIR:-build}
# Compiled objects come from ccache where it is installed (scripts/setup.sh).
# Paths under the checkout are hashed relative to it, so that another clone
# (CI's) finds what this one compiled.
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_WERROR=ON -DTUTTI_REQUIRE_TORCH=ON \
  -DTUTTI_PYTHON_EXECUTABLE="${TUTTI_VENV:-$PWD/.venv}/bin/python" -DTUTTI_BUILD_TESTS=ON -DTUTTI_BUILD_TOOLS=ON -DTUTTI_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$dir" -j"${TUTTI_JOBS:-$(nproc)}"
