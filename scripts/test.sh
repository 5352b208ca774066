#!/usr/bin/env bash
# Builds tutti and runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 900 "$@"
echo "test suite finished in $(( $(date +%s) - start )) s"
