#!/usr/bin/env bash
# tutti as a torch user installs it, in fresh venvs made by PYTHON (a
# CPython with torch==2.13.0 on its pip's reach):
#   1. venv a: pip install torch==2.13.0, then pip install SRC (the library,
#      the module and the torch backend built against a's torch); from
#      outside the source tree, the seed's nine torch programs on 2 ranks,
#      and a 2-rank DDP training under torchrun that matches gloo's;
#   2. pip wheel SRC (the same build folder), then venv b: pip install
#      torch==2.13.0 and the wheel; a smoke test of 2 ranks under torchrun,
#      which does not import tutti (torch's plugin mechanism registers it).
#
#   tests/install/pip_test.sh PYTHON SRC
#
# Builds go through ccache where it is installed. Everything lives in
# SRC/build-pip (made anew, removed at the end): one path under the checkout
# for every run, so that ccache finds the library's objects of the last run
# or of another clone.
set -euo pipefail
python=$1 src=$(cd "$2" && pwd)
work=$src/build-pip
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$src CCACHE_NOHASHDIR=1
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
unset PYTHONPATH
quiet() { grep -v "is ignored: it is neither" || true; }
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cd "$work"  # nothing of the source tree on the path

start=$(date +%s)
"$python" -m venv a
a/bin/pip install -q torch==2.13.0 2>&1 | quiet
a/bin/pip install -q -C build-dir="$work/build" "$src" 2>&1 | quiet
echo "pip install . into a fresh venv: $(( $(date +%s) - start )) s"
a/bin/python - <<'PY'
import os, tutti, tutti.torch, torch.distributed as d
for m in (tutti, tutti.torch):
    assert "site-packages" in m.__file__, m.__file__
assert "TUTTI" in d.Backend._plugins
print("installed:", os.path.dirname(tutti.__file__))
PY
out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) timeout 240 a/bin/python "$src/python/examples/seed_examples.py" tutti 2)
echo "$out"
for r in 0 1; do
  for ex in p2p_block_func p2p_unblock_func broadcast_func reduce_func allreduce_func gather_func allgather_func \
            scatter_func reduce_scatter_func; do
    grep -qx "Rank $r: == $ex" <<<"$out" || { echo "pip_test: rank $r did not run $ex" >&2; exit 1; }
  done
  grep -qx "Rank  $r  has data  tensor(\[2\.\])" <<<"$out" || { echo "pip_test: rank $r's all_reduce" >&2; exit 1; }
done
! grep -q "raised" <<<"$out" || { echo "pip_test: an example raised" >&2; exit 1; }
timeout 240 a/bin/python -m torch.distributed.run --nproc_per_node=2 --master_port="$(free_port)" \
  "$src/python/tests/ddp_worker.py" >ddp.out 2>&1 || { cat ddp.out; exit 1; }
[ "$(grep -cx ok ddp.out)" = 2 ] || { cat ddp.out; echo "pip_test: DDP on tutti did not match gloo" >&2; exit 1; }
echo "DDP on 2 ranks under torchrun: $(grep -m1 "difference" ddp.out || echo ok)"

start=$(date +%s)
a/bin/pip wheel -q --no-deps -C build-dir="$work/build" -w dist "$src" 2>&1 | quiet
wheel=$(ls dist/tutti-*.whl)
"$python" -m venv b
b/bin/pip install -q torch==2.13.0 "$wheel" 2>&1 | quiet
echo "pip wheel ., installed into another fresh venv: $(( $(date +%s) - start )) s ($(basename "$wheel"))"
# No `import tutti.torch`: torch's plugin mechanism makes "tutti" known.
cat >smoke.py <<'PY'
import os, sys, torch, torch.distributed as dist
assert "tutti" not in sys.modules
dist.init_process_group("tutti")
import tutti.torch
r, n = dist.get_rank(), dist.get_world_size()
x = torch.arange(1000, dtype=torch.float32) * (r + 1)
dist.all_reduce(x)
assert torch.equal(x, torch.arange(1000, dtype=torch.float32) * (n * (n + 1) // 2)), x[:4]
out = torch.empty(3 * n)
dist.all_gather_into_tensor(out, torch.full((3,), float(r)))
assert out.tolist() == [float(i) for i in range(n) for _ in range(3)], out
dist.barrier()
dist.destroy_process_group()
print(f"smoke ok {r}/{n} {tutti.torch.__file__}")
PY
timeout 120 b/bin/python -m torch.distributed.run --nproc_per_node=2 --master_port="$(free_port)" smoke.py \
  >smoke.out 2>&1 || { cat smoke.out; exit 1; }
grep "smoke ok" smoke.out
[ "$(grep -c "smoke ok" smoke.out)" = 2 ] && grep -q "$work/b/" smoke.out
echo "pip test passed"
