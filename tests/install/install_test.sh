#!/usr/bin/env bash
set -euo pipefail
build=$1 consumer=$2 tuttirun=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/tutti/tutti.h"
test -f "$work/prefix/lib/cmake/tutti/tuttiConfig.cmake"
test -f "$work/prefix/lib/cmake/tutti/tuttiConfigVersion.cmake"
test -f "$work/prefix/lib/pkgconfig/tutti.pc"
# 1. find_package(tutti)
cmake -S "$consumer" -B "$work/cbuild" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cbuild" >/dev/null
out=$("$tuttirun" -n 2 "$work/cbuild/consumer")
echo "$out"
echo "$out" | grep -q "consumer rank 0 of 2: sum 3" && echo "$out" | grep -q "consumer rank 1 of 2: sum 3"
# 2. pkg-config
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
g++ $(pkg-config --cflags tutti) "$consumer/consumer.cc" -o "$work/consumer_pc" $(pkg-config --libs tutti) \
  -Wl,-rpath,"$work/prefix/lib"
out=$("$tuttirun" -n 2 "$work/consumer_pc")
echo "$out" | grep -q "consumer rank 1 of 2: sum 3"
echo "install test passed"
