#!/usr/bin/env python3
"""The all_reduce of CPU inference with tensor parallelism, side by side
(torch 2.13, 2 ranks): tutti.torch.all_reduce_ on heap tensors and on
shared-memory tensors (tutti.torch.empty), torch.distributed.all_reduce on
tutti (heap tensors) and on gloo, and DeepSpeed's CPU shared-memory
all_reduce (deepspeed.comm.inference_all_reduce). docs/performance.md
("CPU inference: all_reduce against DeepSpeed") shows its tables.

  .venv/bin/python bench/torch/inference_bench.py [--reps 5]
        [--sizes 4K,8K,16K,64K,256K,1M,4M] [--dtypes bf16,fp16,fp32]
        [--deepspeed-python PY] [--layers 8] [--hidden 1024] [--budget 0.1] [--json FILE]

DeepSpeed runs under PY, a Python with torch 2.13.0 and deepspeed installed
(`python3 -m venv V && V/bin/pip install torch==2.13.0 deepspeed`; its op is
compiled at first use); without --deepspeed-python it is left out. Each of
its rows says which path ran: "shm" (its op) or "gloo" (DeepSpeed hands the
call to torch.distributed.all_reduce, as it does for float16 and bfloat16 on
CPUs without AVX-512).

A repetition starts each system's 2 ranks once, in an order that rotates
from one repetition to the next, plus tutti on a world of one (the dispatch
floor: dist.all_reduce on one rank) and `tutti-bench --xcopy` (the cross-core
copy limit: how fast one process copies a buffer another has just written).
A launch loops over the dtypes and sizes: a first call on random small
integers, every element checked (sums are exact in every dtype), warm-up
calls, then as many timed calls as fit in BUDGET seconds (the count agreed
among the ranks), between barriers; a call's time is the slowest rank's.
Then the decoder: LAYERS layers of width HIDDEN with random weights, split
the Megatron way over the 2 ranks (attention's and the MLP's second matmul
row-parallel, each followed by an all_reduce of the token's activations),
one token at a time; its output is checked against the whole model run on
one rank; a token's time is the forward's. Tables: medians over the
repetitions (with how many runs each holds). Each rank uses one intra-op
thread.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: torch_ranks
from torch_ranks import RankFailed, run_ranks  # noqa: E402

SYSTEMS = ("tutti-heap", "tutti-shm", "tutti-dist", "gloo", "deepspeed")
DTYPES = ("bf16", "fp16", "fp32")


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def size_text(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def worker(a):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    system = a.system
    if system.startswith("tutti"):
        try:
            import tutti.torch as tt
        except ImportError:
            sys.path.insert(0, os.path.join(ROOT, "build", "python"))
            import tutti.torch as tt
        dist.init_process_group("tutti")
        # tutti.torch.all_reduce_, as an inference stack calls DeepSpeed's
        # op; "tutti-dist": torch.distributed.all_reduce (torch's dispatch).
        reduce = dist.all_reduce if system == "tutti-dist" else tt.all_reduce_
    elif system == "gloo":
        dist.init_process_group("gloo")
        reduce = dist.all_reduce
    else:
        import deepspeed.comm as dscomm
        dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
        reduce = dscomm.inference_all_reduce
    rank, n = dist.get_rank(), dist.get_world_size()
    plain_all_reduce = dist.all_reduce

    def alloc(count, dtype):
        return tt.empty(count, dtype=dtype) if system == "tutti-shm" else torch.empty(count, dtype=dtype)

    def path_of(call):
        """DeepSpeed's path for this call: its op, or torch.distributed.all_reduce (gloo)."""
        if system != "deepspeed":
            call()
            return system
        used = []
        dist.all_reduce = lambda *x, **k: (used.append(1), plain_all_reduce(*x, **k))[1]
        try:
            call()
        finally:
            dist.all_reduce = plain_all_reduce
        return "gloo" if used else "shm"

    def agreed_max(v):
        t = torch.tensor([v], dtype=torch.float64)
        plain_all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def timed(call):
        for _ in range(3):
            call()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(3):
            call()
        each = agreed_max((time.perf_counter() - t) / 3)
        iters = int(min(20000, max(5, a.budget / max(each, 1e-7))))
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            call()
        return agreed_max((time.perf_counter() - t) / iters) * 1e6, iters

    rows = []
    for name in a.dtypes.split(","):
        dtype = dt[name]
        for size in [parse_size(s) for s in a.sizes.split(",")]:
            count = size // torch.empty(0, dtype=dtype).element_size()
            parts = [torch.randint(-8, 9, (count,), generator=torch.Generator().manual_seed(31 * r + count))
                     .to(dtype) for r in range(n)]
            buf = alloc(count, dtype)
            buf.copy_(parts[rank])
            path = path_of(lambda: reduce(buf))
            want = sum(p.to(torch.float32) for p in parts).to(dtype)
            if not torch.equal(buf, want):
                raise SystemExit(f"rank {rank}: all_reduce of {name} {size} B on {system}: wrong elements")
            # Timed in place, as a model runs it: the sums double every call
            # and reach inf (16-bit types within a few dozen calls, float32
            # within a few hundred); inf costs the vector kernels of every
            # system nothing more, and no call makes NaN from it (x + x).
            us, iters = timed(lambda: reduce(buf))
            rows.append({"kind": "all_reduce", "dtype": name, "bytes": size, "us": us, "iters": iters, "path": path})
    if n > 1 and a.layers > 0:
        for name in a.dtypes.split(","):
            rows.append(decoder(a, torch, dist, reduce, alloc, dt[name], name, rank, n, timed, path_of))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows))


def decoder(a, torch, dist, reduce, alloc, dtype, name, rank, n, timed, path_of):
    """One token through LAYERS layers, split over the ranks; checked against the whole model."""
    h, f = a.hidden, 4 * a.hidden
    g = torch.Generator().manual_seed(5)
    scale = h ** -0.5
    layers = [{k: (torch.randn(*s, generator=g) * scale).to(dtype) for k, s in
               (("v", (h, h)), ("o", (h, h)), ("up", (h, f)), ("down", (f, h)))} for _ in range(a.layers)]
    x0 = torch.randn(1, h, generator=g).to(dtype)
    norm = torch.nn.functional.layer_norm

    def whole():
        x = x0.clone()
        for w in layers:
            x = norm(x + (x @ w["v"]) @ w["o"], (h,))
            x = norm(x + torch.nn.functional.gelu(x @ w["up"]) @ w["down"], (h,))
        return x

    # Column-parallel first matmuls, row-parallel second ones: each rank
    # holds 1/n of every layer's columns (rows of the second).
    cols, fcols = slice(rank * h // n, (rank + 1) * h // n), slice(rank * f // n, (rank + 1) * f // n)
    mine = [{"v": w["v"][:, cols].contiguous(), "o": w["o"][cols, :].contiguous(),
             "up": w["up"][:, fcols].contiguous(), "down": w["down"][fcols, :].contiguous()} for w in layers]
    outs = [alloc(h, dtype).view(1, h) for _ in range(2)]  # the all_reduces' tensors

    def forward():
        x = x0
        for w in mine:
            torch.matmul(x @ w["v"], w["o"], out=outs[0])
            reduce(outs[0])
            x = norm(x + outs[0], (h,))
            torch.matmul(torch.nn.functional.gelu(x @ w["up"]), w["down"], out=outs[1])
            reduce(outs[1])
            x = norm(x + outs[1], (h,))
        return x

    got, want = forward().float(), whole().float()
    err = (got - want).abs().max().item()
    tol = 1e-3 if dtype == torch.float32 else 0.25
    if err > tol:
        raise SystemExit(f"rank {rank}: decoder ({name}): off the whole model by {err} (tolerance {tol})")
    path = path_of(lambda: reduce(outs[0]))
    us, iters = timed(forward)
    return {"kind": "decoder", "dtype": name, "bytes": h * dtype.itemsize, "us": us, "iters": iters, "path": path,
            "err": err}


def xcopy(a):
    """tutti-bench's cross-core copy figures at each size from 1 MiB (2 ranks)."""
    sizes = [s for s in (parse_size(x) for x in a.sizes.split(",")) if s >= 1 << 20]
    if not sizes:
        return []
    out = f"/tmp/tutti-inference-xcopy-{os.getpid()}.json"
    cmd = [os.path.join(ROOT, "build", "bin", "tuttirun"), "-n", "2", os.path.join(ROOT, "build", "bin", "tutti-bench"),
           "all_reduce", "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "4", "-n", "50", "--xcopy",
           "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
    with open(out) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]  # JSON lines
    os.unlink(out)
    return [{"kind": "xcopy", "bytes": r["bytes"], "gbps": r["xcopy_gbps"]} for r in rows]


def launch(system, n, a):
    argv = [__file__, "--worker", "--system", system, "--sizes", a.sizes, "--dtypes", a.dtypes, "--budget", a.budget,
            "--layers", a.layers if n > 1 else 0, "--hidden", a.hidden]
    env = {}
    python = None
    if system == "deepspeed":
        python = a.deepspeed_python
        env = {"DS_ACCELERATOR": "cpu", "LOCAL_SIZE": str(n)}
    # DeepSpeed's op leaves its segments in /dev/shm: the new ones go.
    before = set(glob.glob("/dev/shm/deepspeed_allreduce_buffer_*"))
    try:
        return run_ranks(n, argv, env=env, timeout=3600, python=python, local_rank=True)
    except RankFailed as e:
        raise SystemExit(f"{system} on {n} ranks: {e}")
    finally:
        for f in set(glob.glob("/dev/shm/deepspeed_allreduce_buffer_*")) - before:
            os.unlink(f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--system", default="tutti-heap", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="4K,8K,16K,64K,256K,1M,4M")
    p.add_argument("--dtypes", default="bf16,fp16,fp32")
    p.add_argument("--deepspeed-python")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.1)
    p.add_argument("--json")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    systems = [s for s in SYSTEMS if s != "deepspeed" or a.deepspeed_python]
    runs = [(s, 2) for s in systems] + [("tutti-dist", 1), ("xcopy", 2)]
    times, paths, copies = {}, {}, {}
    for rep in range(a.reps):
        k = rep % len(runs)
        for system, n in runs[k:] + runs[:k]:
            if system == "xcopy":
                for row in xcopy(a):
                    copies.setdefault(row["bytes"], []).append(row["gbps"])
            else:
                for row in launch(system, n, a):
                    key = (row["kind"], n, system, row["dtype"], row["bytes"])
                    times.setdefault(key, []).append(row["us"])
                    paths.setdefault(key, set()).add(row["path"])
            print(f"rep {rep}: {system} on {n} rank(s) done", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    runs_of = {k: len(v) for k, v in times.items()}
    dtypes, sizes = a.dtypes.split(","), [parse_size(s) for s in a.sizes.split(",")]

    def cell(key):
        if key not in med:
            return "-"
        extra = " (gloo)" if key[2] == "deepspeed" and paths[key] != {"shm"} else ""
        return f"{med[key]:.1f}{extra}"

    print("all_reduce on 2 ranks, us per call (median; runs each: "
          f"{min(runs_of.values())}-{max(runs_of.values())}); ratio = DeepSpeed's time / tutti's")
    print()
    head = ("| dtype | size | tutti heap | tutti shared | tutti heap, dist.all_reduce | gloo |" +
            (" DeepSpeed | DS / heap | DS / shared |" if a.deepspeed_python else ""))
    print(head)
    print("|---|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if a.deepspeed_python else ""))
    for d in dtypes:
        for s in sizes:
            k = lambda sys_: ("all_reduce", 2, sys_, d, s)  # noqa: E731
            line = (f"| {d} | {size_text(s)} | {cell(k('tutti-heap'))} | {cell(k('tutti-shm'))} | "
                    f"{cell(k('tutti-dist'))} | {cell(k('gloo'))} |")
            if a.deepspeed_python:
                ds = med.get(k("deepspeed"))
                line += (f" {cell(k('deepspeed'))} | {ds / med[k('tutti-heap')]:.2f} | "
                         f"{ds / med[k('tutti-shm')]:.2f} |")
            print(line)
    print()
    floor_key = ("all_reduce", 1, "tutti-dist", "bf16", 8 << 10)
    if floor_key in med:
        f = med[floor_key]
        print(f"dispatch floor: dist.all_reduce of 8 KiB bf16 on a world of one: {f:.2f} us "
              f"(median of {runs_of[floor_key]})")
        for sys_ in ("tutti-dist", "tutti-heap", "tutti-shm"):
            k = ("all_reduce", 2, sys_, "bf16", 8 << 10)
            if k in med:
                print(f"  {sys_} on 2 ranks: {med[k]:.2f} us = {med[k] / f:.2f} x the floor")
        print()
    if copies:
        print("bus bandwidth against the cross-core copy (2 ranks: busbw = size / time)")
        print()
        print("| dtype | size | copy (GB/s) | tutti heap busbw / copy | tutti shared busbw / copy |")
        print("|---|---|---:|---:|---:|")
        for s in sorted(copies):
            c = statistics.median(copies[s])
            for d in dtypes:
                r = [s / med[("all_reduce", 2, sys_, d, s)] / 1e3 / c
                     if ("all_reduce", 2, sys_, d, s) in med else float("nan") for sys_ in ("tutti-heap", "tutti-shm")]
                print(f"| {d} | {size_text(s)} | {c:.1f} | {r[0]:.2f} | {r[1]:.2f} |")
        print()
    dec = sorted({k for k in med if k[0] == "decoder"})
    if dec:
        print(f"decoder forward, one token, {a.layers} layers of {a.hidden}, 2 ranks: us per token (median)")
        print()
        print("| dtype | " + " | ".join(s for s in systems) + " |")
        print("|---|" + "---:|" * len(systems))
        for d in dtypes:
            print(f"| {d} | " + " | ".join(cell(("decoder", 2, s, d, a.hidden * (4 if d == 'fp32' else 2)))
                                           for s in systems) + " |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": [{"kind": k[0], "ranks": k[1], "system": k[2], "dtype": k[3], "bytes": k[4],
                                 "median_us": med[k], "runs": runs_of[k], "all_us": times[k],
                                 "paths": sorted(paths[k])} for k in sorted(med)],
                       "xcopy_gbps": {str(s): v for s, v in copies.items()}}, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
