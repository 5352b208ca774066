#!/usr/bin/env bash
# Makes the Python environment tutti's Python package is built for and tested
# in: a venv at .venv (or $TUTTI_VENV) with torch 2.13.0 (the CPU build), and
# what the build and the tests need from PyPI. Idempotent: does nothing when
# the venv already holds exactly these (python/requirements-dev.txt, stamped).
#
#   scripts/python_env.sh        prints nothing but what it installs
#
# The venv is made by $TUTTI_BASE_PYTHON (default: python3 on PATH, a CPython
# 3.11 with venv; Debian's python3-venv is installed where venv is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TUTTI_VENV:-$PWD/.venv}
req=python/requirements-dev.txt
stamp=$venv/.tutti-requirements
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  exit 0
fi
base=${TUTTI_BASE_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if ! "$base" -c 'import ensurepip, venv' 2>/dev/null; then
    # Debian's own python3 ships venv and ensurepip in a package of their own.
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    v=$("$base" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "python$v-venv"
  fi
  echo "python_env: making $venv with $("$base" --version 2>&1)"
  "$base" -m venv "$venv"
fi
echo "python_env: installing $req into $venv"
# torch==2.13.0 is the CPU build pip finds on this machine's disk; nothing
# here may widen it (a bare torch would fetch a CUDA build of several GB).
# (pip's warnings about index folders this machine lacks are left out.)
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" 2> >(grep -v "is ignored: it is neither" >&2)
cp "$req" "$stamp"
