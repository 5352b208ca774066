"""torch 2.x parallelism on tutti (test_torch_parallel.py): one launch per
world size runs every part in turn and prints "ok" last.

  parallel_worker.py 4 DIR   device mesh, DTensor, tensor parallelism,
                             FSDP2 and HSDP against gloo, a distributed
                             checkpoint saved to DIR
  parallel_worker.py 2 DIR   FSDP2 against gloo, DIR's checkpoint loaded
                             on 2 ranks, functional collectives eager and
                             compiled, DDP comm hooks and static_graph
                             against gloo, pipelining

Every reference is computed in this process: the same module run whole on
one process (seeded alike on every rank), or the same training on gloo
groups of the same ranks. Inputs are random (seeded per rank and step)."""
import copy
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import tutti.torch  # noqa: F401  (registers the "tutti" backend)
from torch_probes import met_in_store, sockets

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
CPU = torch.device("cpu")
torch.set_num_threads(1)


def ok(cond, what):
    if not cond:
        raise AssertionError(f"rank {rank}: {what}")


def close(a, b, what, tol=1e-5):
    """Every element of a within tol of b, relative to b's scale."""
    a, b = a.detach().float(), b.detach().float()
    ok(a.shape == b.shape, f"{what}: shape {tuple(a.shape)} against {tuple(b.shape)}")
    err = (a - b).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.abs().max().item() if b.numel() else 0.0)
    ok(err <= tol * scale, f"{what}: differs by {err:.3g} (scale {scale:.3g})")


def same(a, b, what):
    ok(torch.equal(a, b), f"{what}: {a.flatten()[:6].tolist()} against {b.flatten()[:6].tolist()}")


def is_tutti(group):
    return dist.get_backend(group) == "tutti"


class Ops:
    """The tutti operations a piece of code ran, by the profiler's
    "tutti:<op>" events."""

    def __enter__(self):
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)
        self.names = {e.name for e in self.prof.events() if e.name.startswith("tutti:")}
        # "tutti:_allgather_base", "tutti:all_gather" and
        # "tutti:allgather_into_tensor_coalesced" are all "allgather".
        self.families = set()
        for name in self.names:
            family = name[len("tutti:"):].replace("_", "")
            for part in ("base", "intotensor", "tensor", "coalesced"):
                family = family.replace(part, "")
            self.families.add(family)
        return False

    def ran(self, family):
        return family in self.families


# ---- models -----------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP."""

    def __init__(self, dim=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden)

    def attention(self, x):
        b, s, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        # -1: under tensor parallelism each rank holds heads / tp of them
        q, k, v = (t.view(b, s, -1, x.shape[-1] // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, vocab=64, dim=32, layers=2, seq=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def batch(step, who, size=4, seq=16, vocab=64):
    g = torch.Generator().manual_seed(1000 * step + who)
    return torch.randint(0, vocab, (size, seq + 1), generator=g)


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


# ---- device mesh --------------------------------------------------------------------

def mesh_part():
    from torch.distributed.device_mesh import init_device_mesh
    dist.barrier()
    before = sockets()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    opened = sockets() - before
    dp, tp = mesh["dp"].get_group(), mesh["tp"].get_group()
    for name, g in (("dp", dp), ("tp", tp)):
        ok(is_tutti(g), f"mesh[{name!r}]'s group is tutti's, not {dist.get_backend(g)}")
        ok(not met_in_store(g), f"mesh[{name!r}]'s group met through the store (a rendezvous per group)")
    ok(opened == 0, f"building the mesh opened {opened} sockets (its groups are splits of the world)")
    # rank = 2 * dp_index + tp_index
    ok(dist.get_process_group_ranks(tp) == [rank // 2 * 2, rank // 2 * 2 + 1], "tp groups are rows")
    ok(dist.get_process_group_ranks(dp) == [rank % 2, rank % 2 + 2], "dp groups are columns")
    x = torch.randn(1000, generator=torch.Generator().manual_seed(rank))
    want = sum(torch.randn(1000, generator=torch.Generator().manual_seed(r)) for r in dist.get_process_group_ranks(tp))
    y = x.clone()
    with Ops() as ops:
        dist.all_reduce(y, group=tp)
    close(y, want, "all_reduce on mesh['tp']")
    ok(ops.ran("allreduce"), f"the all_reduce ran on tutti: {ops.names}")
    gathered = torch.empty(2, 1000)
    dist.all_gather_into_tensor(gathered, x, group=dp)
    for i, r in enumerate(dist.get_process_group_ranks(dp)):
        same(gathered[i], torch.randn(1000, generator=torch.Generator().manual_seed(r)), "all_gather on mesh['dp']")
    return mesh


# ---- DTensor ------------------------------------------------------------------------

def dtensor_part(mesh):
    from torch.distributed.tensor import distribute_tensor, Shard, Replicate, Partial, DTensor
    from torch.distributed.device_mesh import init_device_mesh
    world = init_device_mesh("cpu", (n,))
    full = torch.randn(8 * n, 12 * n, generator=torch.Generator().manual_seed(7))
    cases = [  # (placements before, after, the collective torch runs underneath)
        ([Shard(0)], [Replicate()], "allgather"),
        ([Shard(1)], [Replicate()], "allgather"),
        ([Shard(0)], [Shard(1)], "alltoall"),
        ([Replicate()], [Shard(0)], None),  # a local slice: no communication
    ]
    for before, after, op in cases:
        d = distribute_tensor(full, world, before)
        with Ops() as ops:
            r = d.redistribute(world, after)
            local = r.to_local().clone()
        close(r.full_tensor(), full, f"redistribute {before} -> {after}", tol=0)
        want = distribute_tensor(full, world, after).to_local()
        same(local, want, f"local part after {before} -> {after}")
        if op:
            ok(ops.ran(op), f"{before} -> {after} ran {op} on tutti: {ops.names}")
    # Partial: each rank holds an addend of the whole.
    parts = [torch.randn(8 * n, 4, generator=torch.Generator().manual_seed(100 + r)) for r in range(n)]
    total = sum(parts)
    for after, op in (([Replicate()], "allreduce"), ([Shard(0)], "reducescatter")):
        p = DTensor.from_local(parts[rank].clone(), world, [Partial()])
        with Ops() as ops:
            r = p.redistribute(world, after)
            local = r.to_local().clone()
        close(local, distribute_tensor(total, world, after).to_local(), f"Partial -> {after}")
        ok(ops.ran(op), f"Partial -> {after} ran {op} on tutti: {ops.names}")
    # 2-D: Shard on dp, Shard on tp; back to Replicate on both.
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    close(d.full_tensor(), full, "2-D redistribute (Shard(0), Shard(1)) -> Replicate", tol=0)
    # DTensor arithmetic: a matmul of sharded operands.
    a = torch.randn(4 * n, 6 * n, generator=torch.Generator().manual_seed(8))
    b = torch.randn(6 * n, 5, generator=torch.Generator().manual_seed(9))
    c = distribute_tensor(a, world, [Shard(1)]) @ distribute_tensor(b, world, [Shard(0)])
    close(c.full_tensor(), a @ b, "Shard(1) @ Shard(0) (a Partial, then all_reduce)")


def tensor_parallel_part(mesh):
    from torch.distributed.tensor.parallel import (parallelize_module, ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, PrepareModuleInput)
    from torch.distributed.tensor import Shard, Replicate
    tp = mesh["tp"]
    # An MLP: up column-wise, down row-wise.
    torch.manual_seed(11)
    whole = MLP()
    model = parallelize_module(copy.deepcopy(whole), tp, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(12))
    close(model(x), whole(x), "tensor-parallel MLP forward")
    model(x).sum().backward()
    whole(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), whole.parameters()):
        close(p.grad.full_tensor(), q.grad, f"tensor-parallel MLP gradient of {name}")

    # A transformer block: sequence-parallel norms, column-wise q, k, v and
    # up, row-wise o and down.
    torch.manual_seed(13)
    whole = Block()
    plan = {
        "norm1": SequenceParallel(),
        "q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
        "o": RowwiseParallel(output_layouts=Shard(1)),
        "norm2": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    }
    model = parallelize_module(copy.deepcopy(whole), tp, plan)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(14))
    want = whole(x)
    from torch.distributed.tensor import DTensor, distribute_tensor
    xs = distribute_tensor(x, tp, [Shard(1)]).to_local()  # each rank: its part of the sequence
    got = DTensor.from_local(model(xs), tp, [Shard(1)]).full_tensor() if not isinstance(model(xs), DTensor) \
        else model(xs).full_tensor()
    close(got, want, "tensor-parallel transformer block forward")
    # Backward: the loss of the whole output, on every rank.
    out = model(xs)
    out = out if isinstance(out, DTensor) else DTensor.from_local(out, tp, [Shard(1)])
    out.full_tensor().pow(2).sum().backward()
    want.pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), whole.parameters()):
        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        close(g, q.grad, f"tensor-parallel block gradient of {name}")


# ---- FSDP2 --------------------------------------------------------------------------

def train_fsdp(mesh, steps=20, seed=21, who=None, reshard=True):
    """fully_shard training of a small transformer on `mesh` (1-D: FSDP,
    2-D: HSDP); every rank's batch is its own. Returns the losses,
    averaged over the ranks, and the model."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = Transformer()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = lm_loss(model, batch(step, rank))
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, group=mesh.get_group(0) if mesh.ndim == 1 else None)
        losses.append(avg.item() / n)
    return losses, model


def fsdp_part():
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (n,))
    gmesh = init_device_mesh("cpu", (n,), backend_override={0: "gloo"})
    ok(is_tutti(mesh.get_group()) and not is_tutti(gmesh.get_group()), "one mesh on tutti, one on gloo")
    with Ops() as ops:
        t_losses, model = train_fsdp(mesh, steps=2)
    for op in ("allgather", "reducescatter"):
        ok(ops.ran(op), f"FSDP2 ran {op} on tutti: {ops.names}")
    t_losses, model = train_fsdp(mesh)
    g_losses, _ = train_fsdp(gmesh)
    for i, (a, b) in enumerate(zip(t_losses, g_losses)):
        ok(abs(a - b) <= 1e-5, f"FSDP2 step {i}: loss {a!r} on tutti, {b!r} on gloo")
    ok(t_losses[-1] < t_losses[0], f"FSDP2 trains: {t_losses[0]:.4f} -> {t_losses[-1]:.4f}")
    return model


def hsdp_part():
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    gmesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"),
                             backend_override={"replicate": "gloo", "shard": "gloo"})
    t_losses, _ = train_fsdp(mesh)
    g_losses, _ = train_fsdp(gmesh)
    for i, (a, b) in enumerate(zip(t_losses, g_losses)):
        ok(abs(a - b) <= 1e-5, f"HSDP step {i}: loss {a!r} on tutti, {b!r} on gloo")


def checkpoint_save(model, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    sd = get_model_state_dict(model)
    dcp.save(sd, checkpoint_id=path)
    full = {k: v.full_tensor() for k, v in sd.items()}
    if rank == 0:
        torch.save(full, os.path.join(path, "reference.pt"))
    dist.barrier()


def checkpoint_load(path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(99)  # other weights than the saved ones
    model = Transformer()
    mesh = init_device_mesh("cpu", (n,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sd = get_model_state_dict(model)
    dcp.load(sd, checkpoint_id=path)
    set_model_state_dict(model, sd)
    want = torch.load(os.path.join(path, "reference.pt"))
    got = get_model_state_dict(model)
    ok(sorted(got) == sorted(want), "the loaded checkpoint has the saved keys")
    for k, v in got.items():
        same(v.full_tensor(), want[k], f"checkpoint of 4 ranks loaded on 2: {k}")


# ---- functional collectives -------------------------------------------------------

def functional_part():
    import torch.distributed._functional_collectives as funcol
    group = dist.group.WORLD
    x = torch.randn(8 * n, 3, generator=torch.Generator().manual_seed(30 + rank))
    xs = [torch.randn(8 * n, 3, generator=torch.Generator().manual_seed(30 + r)) for r in range(n)]

    def f(x):
        a = funcol.all_reduce(x, "sum", group)
        g = funcol.all_gather_tensor(x, 0, group)
        s = funcol.reduce_scatter_tensor(x, "sum", 0, group)
        t = funcol.all_to_all_single(x, None, None, group)
        b = funcol.broadcast(x, 1, group)
        return a * 2, g + 1, s, t, b

    def check(out, how):
        a, g, s, t, b = out
        close(a, 2 * sum(xs), f"{how} all_reduce")
        same(g, torch.cat(xs) + 1, f"{how} all_gather_tensor")
        close(s, sum(xs).chunk(n)[rank], f"{how} reduce_scatter_tensor")
        same(t, torch.cat([xx.chunk(n)[rank] for xx in xs]), f"{how} all_to_all_single")
        same(b, xs[1], f"{how} broadcast")

    check(f(x), "eager")
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    check(compiled(x), "compiled")  # the first call compiles
    b = group._get_backend(CPU)
    seq = b._get_sequence_number_for_group()
    with Ops() as ops:
        out = compiled(x)
    check(out, "compiled (second call)")
    ok(b._get_sequence_number_for_group() == seq + 5, "the compiled graph ran its 5 collectives on tutti")
    ok({"allreduce", "allgather", "reducescatter", "alltoall", "broadcast"} <= ops.families, f"the compiled graph's collectives are tutti's: {ops.names}")
    # The graph inductor generated calls the c10d functional ops.
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(f, backend="inductor", fullgraph=True), x)
    ok(any("_c10d_functional.all_reduce" in c for c in code), "inductor's code calls _c10d_functional.all_reduce")


# ---- DDP --------------------------------------------------------------------------

def ddp_part():
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd
    gloo = dist.new_group(backend="gloo")

    def train(group, hook=None, static=False, steps=8):
        torch.manual_seed(41)
        model = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 16))
        # Buckets of about 2 KB: several per step. PowerSGD gets one bucket
        # (DDP's default size): its callbacks start all_reduces, which with
        # several buckets in flight a CPU backend may see in different
        # orders on different ranks (docs/torch.md, "Known limits"). Its
        # callback waits for the all_reduce it started: a completion thread
        # that ran it would wait for itself.
        cap = 25 if hook == "powersgd" else 0.002
        ddp = DDP(model, process_group=group, static_graph=static, bucket_cap_mb=cap)
        if hook == "fp16":
            ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
        elif hook == "bf16" and group is None:
            ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
        elif hook == "bf16":
            # torch refuses the hook by its name on a CPU build whatever the
            # group (tutti.torch lets it through for tutti's groups): the
            # same function under another name is gloo's reference.
            try:
                ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
                ok(False, "torch took bf16_compress_hook on a gloo group")
            except TypeError as e:
                ok("BF16 all reduce communication hook required" in str(e), f"torch's refusal: {e}")

            def bf16_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
                return default_hooks.bf16_compress_hook(state, bucket)

            ddp.register_comm_hook(group, bf16_hook)
        elif hook == "powersgd":
            state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                       random_seed=5)
            ddp.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        for step in range(steps):
            g = torch.Generator().manual_seed(100 * step + rank)
            x, y = torch.randn(8, 24, generator=g), torch.randn(8, 16, generator=g)
            opt.zero_grad()
            F.mse_loss(ddp(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    for hook in (None, "fp16", "bf16", "powersgd"):
        for static in (False, True):
            a, b = train(None, hook, static), train(gloo, hook, static)
            for i, (p, q) in enumerate(zip(a, b)):
                close(p, q, f"DDP (hook {hook}, static_graph={static}) parameter {i}: tutti against gloo")
            # Every rank ends with the same parameters.
            for i, p in enumerate(a):
                ref = p.clone()
                dist.broadcast(ref, 0)
                same(p, ref, f"DDP (hook {hook}) parameter {i} agrees with rank 0's")


def callback_part():
    """A future's callback that starts an operation and waits for it, two
    deep (PowerSGD's hook does it once): the callbacks run on completion
    threads that are not the ones that find and mark the later futures."""
    big = 1 << 20  # above the size run inline on the calling thread
    ok(tutti.torch.inline_bytes() < 4 * big, "the operations run on tutti's progress thread")
    xs = [torch.randn(big, generator=torch.Generator().manual_seed(60 + r)) for r in range(n)]
    total = sum(xs)

    def inner(fut):
        y = fut.value()[0] * 2
        return dist.all_reduce(y, async_op=True).get_future().wait()[0]

    def outer(fut):
        y = fut.value()[0] + 1
        f = dist.all_reduce(y, async_op=True).get_future().then(inner)
        return f.wait()

    x = xs[rank].clone()
    got = dist.all_reduce(x, async_op=True).get_future().then(outer).wait()
    close(got, 2 * n * n * (total + 1), "all_reduce inside a callback inside a callback")


# ---- pipelining ---------------------------------------------------------------------

def pipeline_part():
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, Schedule1F1B
    torch.manual_seed(51)
    layers = [nn.Sequential(nn.Linear(16, 32), nn.Tanh()), nn.Sequential(nn.Linear(32, 8))]
    whole = nn.Sequential(*copy.deepcopy(layers))
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(52))
    y = torch.randn(8, 8, generator=torch.Generator().manual_seed(53))
    want = F.mse_loss(whole(x), y, reduction="sum")
    want.backward()
    for schedule in (ScheduleGPipe, Schedule1F1B):
        part = copy.deepcopy(layers[rank])
        stage = PipelineStage(part, rank, n, CPU)
        losses = []
        sched = schedule(stage, n_microbatches=4, loss_fn=lambda o, t: F.mse_loss(o, t, reduction="sum"),
                         scale_grads=False)  # the sum over the microbatches, as the whole batch has
        with Ops() as ops:
            if rank == 0:
                sched.step(x)
            else:
                out = sched.step(target=y, losses=losses)
        ok(ops.ran("send") and ops.ran("recv"), f"{schedule.__name__}: the stages sent and received on tutti: {ops.names}")
        if rank == 1:
            close(out, whole(x), f"{schedule.__name__}: the last stage's output")
            close(sum(losses), want, f"{schedule.__name__}: the loss")
        for p, q in zip(part.parameters(), whole[rank].parameters()):
            close(p.grad, q.grad, f"{schedule.__name__}: gradient of stage {rank}")


def main():
    parts, path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("tutti")
    ok(n == parts, f"{n} ranks for the {parts}-rank parts")
    timings = {}

    def run(name, fn, *args):
        t = time.monotonic()
        r = fn(*args)
        timings[name] = round(time.monotonic() - t, 2)
        dist.barrier()
        return r

    if n == 4:
        mesh = run("mesh", mesh_part)
        run("dtensor", dtensor_part, mesh)
        run("tensor_parallel", tensor_parallel_part, mesh)
        model = run("fsdp", fsdp_part)
        run("hsdp", hsdp_part)
        run("checkpoint_save", checkpoint_save, model, path)
    else:
        run("fsdp", fsdp_part)
        run("checkpoint_load", checkpoint_load, path)
        run("functional", functional_part)
        run("callbacks", callback_part)
        run("ddp", ddp_part)
        run("pipeline", pipeline_part)
    print(json.dumps(timings))
    dist.destroy_process_group()
    print("ok")


if __name__ == "__main__":
    main()
