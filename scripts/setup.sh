#!/usr/bin/env bash
# Installs what building and testing tutti needs, from Debian's packages.
# Idempotent: does nothing when everything is already there.
set -euo pipefail
# clang and its runtimes (libFuzzer) build the fuzz targets and the clang
# builds of the build matrix; clang-format checks the sources' style; g++ brings the
# sanitizer runtimes of the sanitized test builds. pybind11 builds the Python
# module; libtorch-dev (headers and CMake config of python3-torch) the
# torch.distributed backend; python3-pytest runs their tests, python3-torchvision
# the one test of torch's distributed suite that builds a torchvision model.
# munge, slurmctld, slurmd, slurm-client, openmpi-bin and mpich are the launchers the tests of
# tests/launchers start the seed tour with; libpmix-dev brings the headers of
# the PMIx client the rendezvous under Open MPI loads at run time.
packages=(cmake ninja-build g++ clang clang-format libclang-rt-dev pkg-config python3 libgtest-dev libgmock-dev libbenchmark-dev
          libssl-dev libcli11-dev nlohmann-json3-dev python3-pybind11 pybind11-dev libtorch-dev python3-pytest
          python3-numpy python3-torch python3-torchvision munge slurmctld slurmd slurm-client openmpi-bin mpich libpmix-dev)
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
