#!/usr/bin/env bash
# Builds tutti, runs the seed tour (the nine examples of the tutorial, in
# C++) on N local ranks, then the seed's own torch.distributed programs
# (python/examples/seed_examples.py) on backend "tutti", on N ranks as well:
# ./scripts/demo.sh [N]   (N defaults to 4)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-4}
bash scripts/build.sh
echo "== the seed tour in C++ (build/bin/tuttirun -n $n build/bin/seed_tour)"
build/bin/tuttirun -n "$n" build/bin/seed_tour
echo "== the seed's torch.distributed programs on backend \"tutti\" (python/examples/seed_examples.py tutti $n)"
if [ "$n" -gt 2 ]; then
  echo "   (the tutorial's p2p_unblock_func sets its request only on ranks 0 and 1: ranks 2 and up raise"
  echo "    UnboundLocalError there, with any backend, and the other examples go on)"
fi
# MASTER_ADDR/MASTER_PORT as the tutorial sets them, on a port that is free.
python=${TUTTI_VENV:-$PWD/.venv}/bin/python  # torch 2.13 (scripts/python_env.sh)
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH} \
  exec "$python" python/examples/seed_examples.py tutti "$n"
