#!/usr/bin/env python3
"""Training steps on 2 ranks, backend "tutti" against "gloo" in one run,
beside the same model's step in one process (the compute alone):
DistributedDataParallel (--kind ddp), FSDP2's fully_shard (--kind fsdp), or
the forward and backward of a tensor-parallel MLP (--kind tp).
docs/performance.md ("DDP, end to end" and "torch 2.x: FSDP2 and tensor
parallelism") shows its tables.

  .venv/bin/python bench/ddp/ddp_bench.py [--kind ddp|fsdp|tp] [--models large,small] [--reps 5]
        [--steps 20] [--warmup 5] [--systems compute,tutti,gloo] [--dtype float32|bfloat16] [--json FILE]

Systems: compute (one process, no communication), tutti, gloo, nocomm (ddp
only: DDP on 2 ranks whose comm hook returns each bucket untouched: DDP's
own work, its bucket copies and hooks, under the load of 2 ranks; its losses
are each rank's own and are not compared), and tutti-inline (tutti with
every operation in the training thread, TUTTI_TORCH_INLINE_BYTES=1G: no
progress thread).

Models (ddp and fsdp):
  large  four Linear(2048, 2048) (16.8 M parameters, 67 MB of float32
         gradients), batch 8;
  small  three Linear(256, 256) (0.2 M parameters), batch 8.
fsdp shards each Linear and the whole (fully_shard), reshards after the
forward, and steps SGD on the shards. tp (model "mlp"): Linear(1024, 4096),
GELU, Linear(4096, 1024) on 64 tokens, in --dtype, the first Linear split
by columns and the second by rows over the 2 ranks (parallelize_module:
ColwiseParallel, RowwiseParallel): a step is the forward, whose output is
all_reduced, and the backward (no optimizer); its compute alone is one
rank's half of the MLP in one process.
Each repetition runs every system once, in an order that rotates from one
repetition to the next; a run starts its own processes (2 ranks, or 1 for
the compute alone), makes WARMUP steps, then STEPS timed ones (ddp and
fsdp: zero_grad, forward, backward, SGD step; the backward returns once its
communication is done). A run's step time is the median of its steps (rank
0's); the table gives, per model and system, the median of the
repetitions' figures and how many it holds. Overhead = step - compute (the
compute alone's median). Each rank uses one intra-op thread (the 2 ranks
share the machine's 2 cores); so does the compute alone. Every rank's
inputs are a function of (rank, step), so both backends train the same
model on the same data: their final losses must agree (to 1e-6, relative;
1e-2 in bfloat16), or the run fails.

Run with the project's venv (torch 2.13). Backend "tutti" imports tutti.torch from
build/python unless tutti is importable already; gloo stays on loopback
(GLOO_SOCKET_IFNAME=lo).
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
MODELS = {"large": (2048, 4, 8), "small": (256, 3, 8)}  # width, layers, batch
TP = (1024, 4096, 64)  # the tensor-parallel MLP: width, hidden width, tokens


def build_model(name):
    import torch
    width, layers, _ = MODELS[name]
    torch.manual_seed(0)
    mods = []
    for i in range(layers):
        mods.append(torch.nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def batch(name, rank, step):
    import torch
    width, _, b = MODELS[name]
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(b, width, generator=g), torch.randn(b, width, generator=g)


def tp_model(a, split):
    """The MLP of --kind tp; with `split`, one rank's half (columns of the
    first Linear, rows of the second) for the compute alone."""
    import torch
    width, hidden, _ = TP
    torch.manual_seed(0)
    h = hidden // 2 if split else hidden
    dtype = getattr(torch, a.dtype)
    return torch.nn.Sequential(torch.nn.Linear(width, h), torch.nn.GELU(), torch.nn.Linear(h, width)).to(dtype)


def tp_batch(a, step):
    import torch
    width, _, tokens = TP
    g = torch.Generator().manual_seed(1000 * step)  # the same on both ranks, as tensor parallelism wants
    return torch.randn(tokens, width, generator=g).to(getattr(torch, a.dtype))


def worker(a):
    """One rank (or the one process of the compute alone); prints a JSON line."""
    import torch
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    model = tp_model(a, a.system == "compute") if a.kind == "tp" else build_model(a.model)
    if a.system != "compute":
        import torch.distributed as dist
        if a.system.startswith("tutti"):
            try:
                import tutti.torch  # noqa: F401
            except ImportError:
                sys.path.insert(0, os.path.join(ROOT, "build", "python"))
                import tutti.torch  # noqa: F401
        backend = {"nocomm": "gloo", "tutti-inline": "tutti"}.get(a.system, a.system)
        dist.init_process_group(backend, init_method="env://")
        if a.kind == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for m in model:
                if isinstance(m, torch.nn.Linear):
                    fully_shard(m)
            fully_shard(model)
        elif a.kind == "tp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import parallelize_module, ColwiseParallel, RowwiseParallel
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        else:
            model = torch.nn.parallel.DistributedDataParallel(model)
        if a.system == "nocomm":
            # DDP's own work without the all_reduce: a comm hook that hands
            # each bucket back as it is.
            def no_comm(state, bucket):
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
                return fut
            model.register_comm_hook(None, no_comm)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3) if a.kind != "tp" else None
    times = []
    loss = None
    for step in range(a.warmup + a.steps):
        if a.kind == "tp":
            x = tp_batch(a, step)
            t0 = time.perf_counter()
            loss = model(x).float().pow(2).mean()
            loss.backward()
        else:
            x, y = batch(a.model, rank, step)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append(t1 - t0)
    # The loss of every rank's last step, and a checksum of the parameters.
    final = loss.detach().reshape(1).float()
    if a.system != "compute":
        import torch.distributed as dist
        losses = [torch.zeros(1) for _ in range(dist.get_world_size())]
        dist.all_gather(losses, final)
        final_losses = [float(t) for t in losses]
        dist.barrier()
        dist.destroy_process_group()
    else:
        final_losses = [float(final)]
    if rank == 0:
        print(json.dumps({"step_ms": [t * 1e3 for t in times], "losses": final_losses}))


def run(system, model, steps, warmup, a):
    try:
        return run_once(system, model, steps, warmup, a)
    except RankFailed as e:  # a peer's rank killed by a signal (run_once)
        # torch's gloo rank once died of SIGABRT ("terminate called without
        # an active exception") under the test command's load; a peer's crash
        # is rerun once and reported. tutti's failures are never rerun.
        print(f"{system} {model}: {e}; running it again", file=sys.stderr, flush=True)
        return run_once(system, model, steps, warmup, a)


def run_once(system, model, steps, warmup, a):
    n = 1 if system == "compute" else 2  # nocomm: 2 ranks too
    env = {"TUTTI_TORCH_INLINE_BYTES": "1G"} if system == "tutti-inline" else {}
    try:
        return run_ranks(n, [__file__, "--worker", "--system", system, "--model", model, "--steps", steps,
                             "--warmup", warmup, "--kind", a.kind, "--dtype", a.dtype], env=env)
    except RankFailed as e:
        if e.code < 0 and not system.startswith("tutti"):
            raise
        raise SystemExit(f"{system} {model}: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--system", default="compute")
    p.add_argument("--model", default="small")
    p.add_argument("--models", default="large,small")
    p.add_argument("--systems", default="compute,tutti,gloo")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--kind", default="ddp", choices=("ddp", "fsdp", "tp"))
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--json")
    a = p.parse_args()
    if a.kind == "tp":
        a.models = "mlp"
    if a.worker:
        return worker(a)
    systems = a.systems.split(",")
    results = {}
    for model in a.models.split(","):
        per = {s: [] for s in systems}
        losses = {}
        for rep in range(a.reps):
            order = systems[rep % len(systems):] + systems[:rep % len(systems)]
            for s in order:
                r = run(s, model, a.steps, a.warmup, a)
                per[s].append(statistics.median(r["step_ms"]))
                losses.setdefault(s, r["losses"])
                print(f"{model:5} rep {rep} {s:7} step {per[s][-1]:8.2f} ms  losses {r['losses']}", flush=True)
        # DDP on either backend trains the same model on the same data.
        trained = [s for s in ("gloo", "tutti", "tutti-inline") if s in losses]
        for s in trained[1:]:
            for a_, b_ in zip(losses[s], losses[trained[0]]):
                if abs(a_ - b_) > (1e-2 if a.dtype == "bfloat16" else 1e-6) * max(abs(a_), abs(b_), 1e-30):
                    raise SystemExit(f"{model}: the final losses differ: {s} {losses[s]}, "
                                     f"{trained[0]} {losses[trained[0]]}")
        results[model] = {s: {"median_ms": statistics.median(v), "runs": len(v), "all_ms": v} for s, v in per.items()}
        results[model]["losses"] = losses
    print()
    print("| model | system | step (ms) | compute (ms) | overhead (ms) | runs |")
    print("|---|---|---:|---:|---:|---:|")
    for model, r in results.items():
        comp = r.get("compute", {}).get("median_ms")
        for s in systems:
            m = r[s]["median_ms"]
            over = f"{m - comp:.1f}" if comp is not None and s != "compute" else ""
            print(f"| {model} | {s} | {m:.1f} | {comp:.1f} | {over} | {r[s]['runs']} |" if comp is not None
                  else f"| {model} | {s} | {m:.1f} | | | {r[s]['runs']} |")
        if comp is not None and "tutti" in r and "gloo" in r:
            ot, og = r["tutti"]["median_ms"] - comp, r["gloo"]["median_ms"] - comp
            print(f"{model}: overhead tutti/gloo {ot / og:.2f}; step gloo/tutti {r['gloo']['median_ms'] / r['tutti']['median_ms']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
