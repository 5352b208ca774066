#!/usr/bin/env python3
"""Where a small torch collective's time goes on tutti: the same 8 B
all_reduce (float32) through layers of increasing depth, on 2 ranks and on
a world of one, each layer timed in turn in every repetition.
docs/performance.md ("torch 2.x: where the time goes") shows its table.

  .venv/bin/python bench/torch/dispatch_bench.py [--reps 5] [--iters 20000] [--json FILE]

Layers (per call, the slowest rank's mean over ITERS calls, median over the
repetitions):
  module        tutti's Python module on a numpy array (tutti.init, no torch)
  torch         dist.all_reduce on the tutti group
  torch-async   dist.all_reduce(async_op=True).wait()
  torch-gil     dist.all_reduce while another Python thread of the rank runs
                bytecode (contends for the GIL)
  copy          the same 64 MiB all_reduce on a contiguous tensor and on a
                strided view of the same size (staged through a copy), and
                their difference
On a world of one: torch (the dispatch floor: torch's Python wrapper, its
dispatcher and the Work), and module.
Each rank uses one intra-op thread. tutti.torch is imported from build/python
unless tutti is importable already.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: torch_ranks
from torch_ranks import RankFailed, run_ranks  # noqa: E402


def worker(a):
    try:
        import tutti.torch  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tutti.torch  # noqa: F401
    import numpy as np
    import torch
    import torch.distributed as dist
    import tutti
    torch.set_num_threads(1)
    out = {}

    def timed(name, call, iters, agree):
        for _ in range(min(iters, 200)):
            call()
        agree()
        t = time.perf_counter()
        for _ in range(iters):
            call()
        out[name] = (time.perf_counter() - t) / iters * 1e6

    if a.layer == "module":
        comm = tutti.init()
        x = np.random.default_rng(comm.rank).integers(1, 100, 2).astype(np.float32)
        timed("module", lambda: comm.all_reduce(x), a.iters, comm.barrier)
        took = np.array([out["module"]], dtype=np.float64)
        comm.all_reduce(took, op=tutti.MAX)
        out["module"] = float(took[0])
        comm.barrier()
    else:
        dist.init_process_group("tutti")
        rank = dist.get_rank()
        x = torch.randint(1, 100, (2,), generator=torch.Generator().manual_seed(rank)).float()
        timed("torch", lambda: dist.all_reduce(x), a.iters, dist.barrier)
        if dist.get_world_size() > 1:
            timed("torch-async", lambda: dist.all_reduce(x, async_op=True).wait(), a.iters, dist.barrier)
            stop = False

            def spin():
                k = 0
                while not stop:
                    k += 1

            t = threading.Thread(target=spin)
            t.start()
            timed("torch-gil", lambda: dist.all_reduce(x), max(50, a.iters // 100), dist.barrier)
            stop = True
            t.join()
            big = torch.randint(1, 100, (1 << 24,), generator=torch.Generator().manual_seed(rank)).float()
            strided = torch.empty(1 << 25)[::2]
            strided.copy_(big)
            timed("copy-contiguous", lambda: dist.all_reduce(big), 10, dist.barrier)
            timed("copy-strided", lambda: dist.all_reduce(strided), 10, dist.barrier)
        for k in list(out):
            v = torch.tensor([out[k]], dtype=torch.float64)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            out[k] = v.item()
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(json.dumps(out))


def launch(n, layer, a):
    try:
        return run_ranks(n, [__file__, "--worker", "--layer", layer, "--iters", a.iters])
    except RankFailed as e:
        raise SystemExit(f"{layer} on {n} ranks: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--layer", default="torch")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--json")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    runs = [(2, "module"), (2, "torch"), (1, "module"), (1, "torch")]
    got = {}
    for rep in range(a.reps):
        k = rep % len(runs)
        for n, layer in runs[k:] + runs[:k]:
            for name, us in launch(n, layer, a).items():
                got.setdefault((n, name), []).append(us)
    med = {k: statistics.median(v) for k, v in got.items()}
    print("| ranks | layer | µs per call | runs |")
    print("|---:|---|---:|---:|")
    for (n, name) in sorted(med, key=lambda k: (-k[0], k[1])):
        print(f"| {n} | {name} | {med[(n, name)]:.2f} | {len(got[(n, name)])} |")
    print(f"2 ranks: torch - module = {med[(2, 'torch')] - med[(2, 'module')]:.2f} us; "
          f"floor (torch on 1) = {med[(1, 'torch')]:.2f} us; strided - contiguous at 64 MiB = "
          f"{(med[(2, 'copy-strided')] - med[(2, 'copy-contiguous')]) / 1e3:.2f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{n}:{name}": v for (n, name), v in got.items()}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
