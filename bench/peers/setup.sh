#!/usr/bin/env bash
# Installs the peers tutti is compared against, from Debian (bookworm):
# Open MPI, MPICH, Gloo (C++), numpy and matplotlib (torch 2.13, whose gloo
# backend is a peer too, is in the project's venv: scripts/python_env.sh). Idempotent: asks dpkg first and only runs apt-get (update, then
# install) when something is missing. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  openmpi-bin libopenmpi-dev   # mpicc.openmpi, mpirun.openmpi
  mpich libmpich-dev           # mpicc.mpich, mpiexec.mpich (hydra)
  libgloo-dev                  # /usr/include/gloo, libgloo.so
  python3-numpy python3-matplotlib
  build-essential              # gcc/g++ for the MPI wrappers and gloo_bench
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup.sh: all peers already installed"
  exit 0
fi

SUDO=""
if ((EUID != 0)); then SUDO="sudo"; fi
echo "setup.sh: installing: ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup.sh: done"
