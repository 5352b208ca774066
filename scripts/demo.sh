#!/usr/bin/env bash
# Builds tutti and runs the seed tour (the nine examples of the tutorial) on
# 4 local ranks: ./scripts/demo.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/bin/tuttirun -n "${1:-4}" build/bin/seed_tour
