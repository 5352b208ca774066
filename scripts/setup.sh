#!/usr/bin/env bash
# Installs what building and testing tutti needs, from Debian's packages.
# Idempotent: does nothing when everything is already there.
set -euo pipefail
# clang and its runtimes (libFuzzer) build the fuzz targets and the clang
# builds of the build matrix; clang-format checks the sources' style; g++ brings the
# sanitizer runtimes of the sanitized test builds; ccache keeps compiled objects
# outside the build trees (a fresh clone rebuilds from it). python3-numpy and
# python3-pytest serve the tools and checks that run on Debian's python3; the
# Python package, the torch backend and their tests use the venv of
# scripts/python_env.sh (torch 2.13 from PyPI), which this script makes last.
# munge, slurmctld, slurmd, slurm-client, openmpi-bin and mpich are the launchers the tests of
# tests/launchers start the seed tour with; libpmix-dev brings the headers of
# the PMIx client the rendezvous under Open MPI loads at run time.
packages=(cmake ninja-build g++ clang clang-format libclang-rt-dev pkg-config python3 libgtest-dev libgmock-dev libbenchmark-dev
          libssl-dev libcli11-dev nlohmann-json3-dev python3-pytest
          python3-numpy ccache munge slurmctld slurmd slurm-client openmpi-bin mpich libpmix-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
bash "$(dirname "$0")/python_env.sh"
