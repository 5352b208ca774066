#!/usr/bin/env bash
# Makes the Python environment tutti's Python package is built for and tested
# in: a venv with torch 2.13.0 (the CPU build) and what the build and the
# tests need from PyPI (python/requirements-dev.txt). Idempotent: does nothing
# when the venv already holds exactly these (a stamp of the file).
#
# The venv lives outside the checkout, as ccache's cache does, so that a
# fresh clone finds it made: $TUTTI_CACHE (default ~/.cache/tutti)/venv-<hash
# of the requirements>, and .venv in the checkout links to it. With
# $TUTTI_VENV set, that folder is the venv instead, and .venv is not made.
# It is made by $TUTTI_BASE_PYTHON (default: python3 on PATH, a CPython 3.11
# with venv; Debian's python3-venv is installed where venv is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
req=python/requirements-dev.txt
if [ -n "${TUTTI_VENV:-}" ]; then
  venv=$TUTTI_VENV link=""
else
  cache=${TUTTI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tutti}
  venv=$cache/venv-$(sha256sum "$req" | cut -c1-12) link=$PWD/.venv
fi
stamp=$venv/.tutti-requirements
mkdir -p "$(dirname "$venv")"
# One checkout at a time makes a shared venv.
exec 9>"$venv.lock"
flock 9
if ! { [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; }; then
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
fi
if [ -n "$link" ] && [ "$(readlink "$link" 2>/dev/null)" != "$venv" ]; then
  rm -rf "$link"
  ln -s "$venv" "$link"
fi
