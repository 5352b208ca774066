#!/usr/bin/env python3
"""torch.distributed collectives on CPU tensors, backend "tutti" against
"gloo" in one run (torch 2.13), and torch's dispatch floor: the same call on
a world of one. docs/performance.md ("torch 2.x: collectives") shows its
table.

  .venv/bin/python bench/torch/collectives_bench.py [--worlds 2,4] [--reps 5]
        [--ops all_reduce,all_gather_into_tensor,reduce_scatter_tensor,all_to_all_single,broadcast]
        [--min 8] [--max 64M] [--budget 0.25] [--json FILE]

A repetition starts, for each world size, each backend's ranks once (in an
order that rotates from one repetition to the next) and the world of one of
each backend; a launch loops over the operations and the sizes (powers of 4
from MIN to MAX bytes of float32, 64 KiB, 1 MiB, and MAX). Per operation and size: a
first call whose every output element is checked (the inputs are random
integers, so that sums are exact), warm-up calls, then timed calls, as many
as fit in BUDGET seconds (3 to 2000; the count is agreed among the ranks),
between barriers; the time of a call is the slowest rank's elapsed time over
the count. The table holds, per world, operation and size, the median over
the repetitions of each backend's time (with how many runs it holds) and
gloo's time over tutti's. Sizes are per rank's input: all_gather gathers
SIZE from each rank, reduce_scatter and all_to_all take SIZE and return
SIZE / world (all_to_all SIZE), broadcast and all_reduce take SIZE.

Each rank uses one intra-op thread (the ranks share the machine's cores).
Backend "tutti" imports tutti.torch from build/python unless tutti is
importable already; gloo stays on loopback (GLOO_SOCKET_IFNAME=lo).
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: torch_ranks
from torch_ranks import RankFailed, run_ranks  # noqa: E402
OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast")


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def sizes(lo, hi):
    """Powers of 4 from lo, 64 KiB and 1 MiB (the edges of the targets), and hi."""
    out, s = [], lo
    while s < hi:
        out.append(s)
        s *= 4
    return sorted(set(out + [x for x in (64 << 10, 1 << 20) if lo <= x < hi] + [hi]))


def import_tutti():
    try:
        import tutti.torch  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tutti.torch  # noqa: F401


def worker(a):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if a.backend == "tutti":
        import_tutti()
    dist.init_process_group(a.backend, init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []

    def inputs(r, count):
        g = torch.Generator().manual_seed(7919 * r + count)
        return torch.randint(-1000, 1000, (count,), generator=g).float()

    def setup(op, count):
        """The call to time, and a check of its outputs."""
        x = inputs(rank, count)
        if op == "all_reduce":
            buf = x.clone()
            want = lambda: sum(inputs(r, count) for r in range(n))  # noqa: E731
            return (lambda: dist.all_reduce(buf)), (lambda: buf), want, (lambda: buf.copy_(x))
        if op == "broadcast":
            buf = x.clone()
            return (lambda: dist.broadcast(buf, 0)), (lambda: buf), (lambda: inputs(0, count)), (lambda: buf.copy_(x))
        if op == "all_gather_into_tensor":
            out = torch.empty(count * n)
            return ((lambda: dist.all_gather_into_tensor(out, x)), (lambda: out),
                    (lambda: torch.cat([inputs(r, count) for r in range(n)])), None)
        if op == "reduce_scatter_tensor":
            out = torch.empty(count // n)
            return ((lambda: dist.reduce_scatter_tensor(out, x)), (lambda: out),
                    (lambda: sum(inputs(r, count) for r in range(n)).chunk(n)[rank]), None)
        if op == "all_to_all_single":
            out = torch.empty(count)
            return ((lambda: dist.all_to_all_single(out, x)), (lambda: out),
                    (lambda: torch.cat([inputs(r, count).chunk(n)[rank] for r in range(n)])), None)
        raise SystemExit(f"unknown operation {op}")

    for op in a.ops.split(","):
        for size in sizes(parse_size(a.min), parse_size(a.max)):
            count = max(size // 4, 1)
            if op in ("reduce_scatter_tensor", "all_to_all_single", "all_gather_into_tensor") and n > 1:
                count = max(count // n, 1) * n  # n equal blocks
            call, out, want, reset = setup(op, count)
            call()
            if not torch.equal(out(), want()):
                raise SystemExit(f"rank {rank}: {op} of {count * 4} B: wrong elements")
            # Warm-up, and an estimate of the call's time that sets the count.
            dist.barrier()
            t = time.perf_counter()
            for _ in range(2):
                call()
            each = torch.tensor([(time.perf_counter() - t) / 2])
            dist.all_reduce(each, op=dist.ReduceOp.MAX)
            iters = int(min(2000, max(3, a.budget / max(each.item(), 1e-7))))
            dist.barrier()
            t = time.perf_counter()
            for _ in range(iters):
                call()
            took = torch.tensor([(time.perf_counter() - t) / iters])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            if reset:
                reset()
            rows.append({"op": op, "bytes": count * 4, "us": took.item() * 1e6, "iters": iters})
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows))


def launch(backend, n, a, ops, lo, hi):
    try:
        return run_ranks(n, [__file__, "--worker", "--backend", backend, "--ops", ops, "--min", lo, "--max", hi,
                             "--budget", a.budget], timeout=3600)
    except RankFailed as e:
        raise SystemExit(f"{backend} on {n} ranks: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", default="tutti")
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.25)
    p.add_argument("--json")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    backends = ["tutti", "gloo"]
    times = {}  # (world, op, bytes, backend) -> [us per rep]
    for rep in range(a.reps):
        runs = [(b, int(n)) for n in a.worlds.split(",") for b in backends] + [(b, 1) for b in backends]
        k = rep % len(runs)
        for backend, n in runs[k:] + runs[:k]:
            if n == 1:  # the dispatch floor: all_reduce of the smallest size
                rows = launch(backend, 1, a, "all_reduce", parse_size(a.min), parse_size(a.min))
            else:
                rows = launch(backend, n, a, a.ops, parse_size(a.min), parse_size(a.max))
            for row in rows:
                times.setdefault((n, row["op"], row["bytes"], backend), []).append(row["us"])
            print(f"rep {rep}: {backend} on {n} rank(s) done", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    runs = {k: len(v) for k, v in times.items()}
    floor_key = min((k for k in med if k[0] == 1), key=lambda k: med[k])
    floor = med[floor_key]
    print(f"dispatch floor (all_reduce of {floor_key[2]} B on a world of one, {floor_key[3]}): {floor:.2f} us "
          f"(median of {runs[floor_key]}); tutti {med[(1, 'all_reduce', floor_key[2], 'tutti')]:.2f} us, "
          f"gloo {med[(1, 'all_reduce', floor_key[2], 'gloo')]:.2f} us")
    print()
    print("| ranks | operation | bytes | tutti (us) | gloo (us) | gloo / tutti | runs |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for (n, op, nbytes, backend) in sorted(k for k in med if k[3] == "tutti" and k[0] > 1):
        t, g = med[(n, op, nbytes, "tutti")], med[(n, op, nbytes, "gloo")]
        print(f"| {n} | {op} | {nbytes} | {t:.1f} | {g:.1f} | {g / t:.2f} | {runs[(n, op, nbytes, 'tutti')]} |")
    for n in sorted({k[0] for k in med if k[0] > 1}):
        t8 = med.get((n, "all_reduce", parse_size(a.min), "tutti"))
        if t8:
            print(f"{n} ranks: all_reduce of {parse_size(a.min)} B, tutti / floor = {t8 / floor:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"floor_us": floor, "rows": [{"ranks": k[0], "op": k[1], "bytes": k[2], "backend": k[3],
                                                    "median_us": med[k], "runs": runs[k], "all_us": times[k]}
                                                   for k in sorted(med)]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
