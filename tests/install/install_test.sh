#!/usr/bin/env bash
set -euo pipefail
build=$1 consumer=$2 tuttirun=$3 python=$4
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
# 3. the Python package, when the build has one: importable from the prefix
#    alone (its extensions find the installed libtutti.so), the torch backend too.
if [ -d "$build/python/tutti" ]; then
  pkgdir="$work/prefix/lib/python3/dist-packages"
  test -f "$pkgdir/tutti/__init__.py"
  PYTHONPATH="$pkgdir" "$python" - "$pkgdir" <<'PY'
import sys, numpy as np, tutti
assert tutti.__file__.startswith(sys.argv[1]), tutti.__file__
c = tutti.init(rank=0, world_size=1)
x = np.arange(4.0)
c.all_reduce(x)
assert list(x) == [0.0, 1.0, 2.0, 3.0]
print("installed python package: ok")
PY
  if ls "$build"/python/tutti/torch/_C*.so >/dev/null 2>&1; then
    PYTHONPATH="$pkgdir" "$python" - "$pkgdir" <<'PY'
import sys, torch, torch.distributed as d, tutti.torch
assert tutti.torch.__file__.startswith(sys.argv[1]), tutti.torch.__file__
d.init_process_group("tutti", store=d.HashStore(), rank=0, world_size=1)
x = torch.arange(4.0)
d.all_reduce(x)
assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
d.destroy_process_group()
print("installed torch backend: ok")
PY
  fi
fi
echo "install test passed"
