"""One rank of test_torch_conventions.py: what torch users and torch's own
tests expect of a CPU backend beyond the operations themselves.

  torch_conventions_worker.py PART

PART is one of:
  env        init_process_group("tutti", file://, rank, world_size) under
             launcher variables that say otherwise (WORLD_SIZE alone, a RANK
             of another level, a MASTER_ADDR that resolves nowhere), and a
             sub-group whose ranks are not RANK's
  profiling  every operation records one profiler event "tutti:<op>" with
             its input shapes, with the autograd profiler and torch.profiler,
             run inline and asynchronously
  sparse     all_reduce of random sparse COO tensors (SUM, AVG; dtypes;
             ranks with no entries; uncoalesced inputs), its errors, and DDP
             training an nn.Embedding(sparse=True) against one process
  timeouts   a collective and a barrier that time out say "Timed out" and
             name the rank, the peer, the operation and its sequence number
  monitored  monitored_barrier: a rank missing, timeout 0, wait_all_ranks,
             the answer other ranks get, and a rank that has already left
  groups     (4 ranks over TCP) sequence numbers; new_group made from the
             world's communicator without a rendezvous through the store,
             opening no connection outside the group; split_group;
             set_timeout; shrink_group leaving out a live rank, then a
             killed one from the default group, and a new_group after it

Prints "ok <checks>" at the end.
"""
import datetime
import os
import re
import sys
import time
import warnings

import torch
import torch.distributed as dist

import tutti
import tutti.torch
from torch_probes import met_in_store, sockets

warnings.filterwarnings("ignore", message=".*will be deprecated.*")
torch.set_num_threads(1)
part = sys.argv[1]
rank = int(os.environ["TUTTI_TEST_RANK"])
n = int(os.environ["TUTTI_TEST_WORLD"])
store_file = os.environ["TUTTI_TEST_STORE"]
checks = 0


def ok(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(f"rank {rank}: {what}")


def expect(cls, words, f, regex=None):
    """f() raises cls whose message holds every word (and matches regex)."""
    try:
        f()
    except cls as e:
        for w in words:
            ok(w in str(e), f"{w!r} not in {str(e)!r}")
        if regex:
            ok(re.search(regex, str(e)), f"{regex!r} does not match {str(e)!r}")
        return str(e)
    raise AssertionError(f"rank {rank}: expected {cls.__name__} {words}")


def init(timeout=datetime.timedelta(seconds=60)):
    dist.init_process_group("tutti", init_method="file://" + store_file, rank=rank, world_size=n, timeout=timeout)


# ---- env ------------------------------------------------------------------------

def env_part():
    # The test sets WORLD_SIZE alone (rank 0), RANK and WORLD_SIZE of an
    # outer level (rank 1), a MASTER_ADDR that resolves nowhere (rank 2).
    init()
    ok(dist.get_rank() == rank and dist.get_world_size() == n, "rank and size are torch's")
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    ok(t.item() == n * (n + 1) / 2, f"all_reduce {t}")
    # A sub-group without rank 0: its ranks are not RANK's.
    g = dist.new_group(list(range(1, n)))
    if rank > 0:
        ok(dist.get_rank(g) == rank - 1 and dist.get_world_size(g) == n - 1, "group rank and size")
        x = torch.tensor([float(dist.get_rank(g)) + 10])
        dist.broadcast(x, src=1, group=g)  # global rank 1 is the group's rank 0
        ok(x.item() == 10.0, f"broadcast from the group's rank 0: {x}")
        y = torch.tensor([float(rank)])
        dist.all_reduce(y, group=g)
        ok(y.item() == sum(range(1, n)), f"all_reduce on the group: {y}")
    dist.barrier()


# ---- profiling ------------------------------------------------------------------

def events_of(prof):
    return prof.events() if isinstance(prof, torch.profiler.profile) else prof.function_events


def profiled(kind, f):
    if kind == "autograd":
        ctx = torch.autograd.profiler.profile(record_shapes=True)
    else:
        ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    with ctx as prof:
        f()
    return [e for e in events_of(prof) if e.name.startswith("tutti:")]


def profiling_part():
    init()
    os.environ["TUTTI_TORCH_INLINE_BYTES"] = "0"
    async_group = dist.new_group(list(range(n)))  # every operation on the worker thread
    del os.environ["TUTTI_TORCH_INLINE_BYTES"]
    for group, how in ((None, "inline"), (async_group, "async")):
        me = dist.get_rank(group)
        peer = (me + 1) % n
        left = (me - 1) % n
        g = torch.Generator().manual_seed(rank + 17)
        x = torch.rand(3, 5, generator=g) + 0.5
        flat = torch.rand(n * 4, generator=g)
        cases = [
            ("broadcast", lambda: dist.broadcast(x.clone(), src=0, group=group), [[3, 5]]),
            ("all_reduce", lambda: dist.all_reduce(x.clone(), group=group), [[3, 5]]),
            ("all_reduce", lambda: dist.all_reduce_coalesced([x.clone(), flat.clone()], group=group),
             [[3, 5], [n * 4]]),
            ("reduce", lambda: dist.reduce(x.clone(), dst=0, group=group), [[3, 5]]),
            ("all_gather", lambda: dist.all_gather([torch.empty(3, 5) for _ in range(n)], x, group=group), [[3, 5]]),
            ("all_gather", lambda: dist.all_gather_coalesced([[torch.empty(3, 5)] for _ in range(n)], [x],
                                                             group=group), [[3, 5]]),
            ("_allgather_base", lambda: dist.all_gather_into_tensor(torch.empty(n * 3, 5), x, group=group), [[3, 5]]),
            ("gather", lambda: dist.gather(x, [torch.empty(3, 5) for _ in range(n)] if me == 0 else None, dst=0,
                                           group=group), [[3, 5]]),
            ("scatter", lambda: dist.scatter(torch.empty(3, 5), [x.clone() for _ in range(n)] if me == 0 else None,
                                             src=0, group=group), [[3, 5]] * n if me == 0 else []),
            ("reduce_scatter", lambda: dist.reduce_scatter(torch.empty(3, 5), [x.clone() for _ in range(n)],
                                                           group=group), [[3, 5]] * n),
            ("_reduce_scatter_base", lambda: dist.reduce_scatter_tensor(torch.empty(4), flat.clone(), group=group),
             [[n * 4]]),
            ("all_to_all", lambda: dist.all_to_all_single(torch.empty(n * 4), flat, group=group), [[n * 4]]),
            ("all_to_all", lambda: dist.all_to_all([torch.empty(2) for _ in range(n)],
                                                   [torch.rand(2) for _ in range(n)], group=group), [[2]] * n),
            ("barrier", lambda: dist.barrier(group=group), []),
        ]
        for kind in ("autograd", "torch"):
            for name, f, shapes in cases:
                evs = profiled(kind, f)
                ok([e.name for e in evs] == [f"tutti:{name}"], f"{how} {kind}: {name}: events {[e.name for e in evs]}")
                ok(evs[0].is_async if kind == "autograd" else True, f"{how} {kind}: {name} event is async")
                ok([list(s) for s in evs[0].input_shapes] == shapes,
                   f"{how} {kind}: {name}: input shapes {evs[0].input_shapes}, want {shapes}")
            # send and recv: one event each, with the tensor's shape
            if n > 1:
                def p2p():
                    buf = torch.empty(7)
                    ws = [dist.isend(torch.rand(7), dist.distributed_c10d.get_global_rank(group, peer) if group else peer, group=group),
                          dist.irecv(buf, dist.distributed_c10d.get_global_rank(group, left) if group else left, group=group)]
                    for w in ws:
                        w.wait()
                evs = profiled(kind, p2p)
                ok(sorted(e.name for e in evs) == ["tutti:recv", "tutti:send"], f"{how} {kind}: p2p events {evs}")
                ok(all([list(s) for s in e.input_shapes] == [[7]] for e in evs), f"{how} {kind}: p2p shapes")
            # monitored_barrier (a blocking call: its event is not async)
            if group is None:
                evs = profiled(kind, lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=30)))
                ok([e.name for e in evs] == ["tutti:monitored_barrier"], f"{how} {kind}: monitored_barrier {evs}")
            # a sparse all_reduce
            sp = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (5,))
            evs = profiled(kind, lambda: dist.all_reduce(sp.clone(), group=group))
            ok([e.name for e in evs] == ["tutti:all_reduce"], f"{how} {kind}: sparse all_reduce events")
    # No profiler: operations still work (and record nothing to look at).
    t = torch.ones(4)
    dist.all_reduce(t)
    ok(torch.equal(t, torch.full((4,), float(n))), "all_reduce without a profiler")
    dist.barrier()


# ---- sparse ---------------------------------------------------------------------

def random_sparse(g, shape, sparse_dim, nnz, dtype, duplicates):
    idx = torch.stack([torch.randint(0, shape[d], (nnz,), generator=g) for d in range(sparse_dim)]) \
        if nnz else torch.empty((sparse_dim, 0), dtype=torch.long)
    if duplicates and nnz > 1:
        idx[:, -1] = idx[:, 0]  # an entry twice: the input is not coalesced
    vshape = (nnz,) + tuple(shape[sparse_dim:])
    if dtype.is_floating_point:
        v = torch.rand(vshape, generator=g, dtype=torch.float64) * 8 - 4
        v[v == 0] = 0.5
    else:
        v = torch.randint(1, 50, vshape, generator=g) * torch.where(torch.rand(vshape, generator=g) < 0.5, -1, 1)
    return torch.sparse_coo_tensor(idx, v.to(dtype), shape)


def sparse_part():
    init()
    layouts = [((9,), 1), ((6, 5), 2), ((7, 3), 1), ((5, 3, 2), 1), ((4, 3, 2), 2), ((3, 2, 2, 2), 3)]
    case = 0
    for shape, sparse_dim in layouts:
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                for async_ in (False, True):
                    case += 1
                    # every rank's tensor, from a seed of (rank, case); rank
                    # case % n has no entries at all
                    def tensor_of(r):
                        g = torch.Generator().manual_seed(1000 * case + r)
                        nnz = 0 if r == case % n else int(torch.randint(1, 12, (1,), generator=g))
                        return random_sparse(g, shape, sparse_dim, nnz, dtype, duplicates=(case + r) % 2 == 0)
                    t = tensor_of(rank)
                    w = dist.all_reduce(t, op=op, async_op=async_)
                    if async_:
                        w.wait()
                    dense = sum(tensor_of(r).to_dense().to(torch.float64 if dtype.is_floating_point else torch.int64)
                                for r in range(n))
                    if op == dist.ReduceOp.AVG:
                        dense = dense / n if dtype.is_floating_point else torch.div(dense, n, rounding_mode="trunc")
                    ok(t.is_sparse and t.is_coalesced(), f"case {case}: result is a coalesced sparse tensor")
                    got = t.to_dense()
                    ok(got.dtype == dtype, f"case {case}: dtype {got.dtype}")
                    if dtype.is_floating_point:
                        tol = 8 * n * torch.finfo(dtype).eps * 8
                        ok(torch.allclose(got.double(), dense, atol=tol, rtol=0), f"case {case}: values {got} {dense}")
                    else:
                        ok(torch.equal(got.long(), dense.long()), f"case {case}: values {got} {dense}")
    # Errors: an op that needs the zeros, on every rank alike; sizes that differ.
    sp = torch.sparse_coo_tensor([[0]], [1.0], (3,))
    expect(tutti.InvalidArgument, ["SUM or AVG"], lambda: dist.all_reduce(sp, op=dist.ReduceOp.MAX))
    bad = torch.sparse_coo_tensor([[0]], [1.0], (3 + (rank == n - 1),))
    if n > 1:
        msg = expect(tutti.Mismatch, ["sparse all_reduce", "sizes"], lambda: dist.all_reduce(bad))
        other = 0 if rank == n - 1 else n - 1
        ok(f"rank {other}'s tensor has sizes [{3 + (other == n - 1)}]" in msg, msg)
    bad = torch.sparse_coo_tensor([[0]], [1.0], (3,), dtype=torch.float64 if rank == 0 else torch.float32)
    if n > 1:
        expect(tutti.Mismatch, ["sparse all_reduce", "dtype"], lambda: dist.all_reduce(bad))
    # the group carries on
    t = torch.sparse_coo_tensor([[rank]], [1.0], (n,))
    dist.all_reduce(t)
    ok(torch.equal(t.to_dense(), torch.ones(n)), f"after the errors: {t.to_dense()}")
    ddp_embedding()
    dist.barrier()


def ddp_embedding():
    """DDP over a sparse embedding: each rank's parameters after 3 SGD steps
    equal one process's on the whole batch."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(40, 6, sparse=True)
            self.out = torch.nn.Linear(6, 1)

        def forward(self, i):
            return self.out(self.emb(i).sum(1))

    torch.manual_seed(5)
    ref = Net()
    model = torch.nn.parallel.DistributedDataParallel(Net())
    model.module.load_state_dict(ref.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per = 4
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, 40, (per * n, 3), generator=g)
        y = torch.rand(per * n, 1, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(idx[rank * per:(rank + 1) * per]), y[rank * per:(rank + 1) * per])
        loss.backward()
        ok(model.module.emb.weight.grad.is_sparse, "the embedding's gradient is sparse")
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(idx), y).backward()
        ref_opt.step()
    for (name, a), b in zip(model.module.named_parameters(), ref.parameters()):
        ok(torch.allclose(a, b, atol=1e-6, rtol=0), f"DDP sparse embedding: {name} differs by {(a - b).abs().max()}")


# ---- timeouts -------------------------------------------------------------------

def timeouts_part():
    # The ranks' interpreters start seconds apart on a loaded machine; they
    # meet first, so that the 1 s timeout given to init covers init alone.
    start = dist.FileStore(store_file + ".start", n)
    start.add("arrived", 1)
    deadline = time.monotonic() + 120
    while start.add("arrived", 0) < n:
        ok(time.monotonic() < deadline, "the ranks met before init within 120 s")
        time.sleep(0.01)
    init(timeout=datetime.timedelta(seconds=1))
    # Groups are made while every rank is here (making one waits for all).
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=1))
    h = dist.new_group(list(range(n)))
    t = torch.ones(8)
    dist.all_reduce(t)  # operation 1 of the group, on every rank
    if rank == 0:
        t0 = time.monotonic()
        msg = expect(tutti.Timeout, ["Timed out", "rank 0", "all_reduce #2", "rank 1"],
                     lambda: dist.all_reduce(torch.ones(8)), regex=" (Timed out|closed|timeout) ")
        took = time.monotonic() - t0
        ok(0.9 <= took < 6, f"timed out after {took:.2f} s (timeout 1 s): {msg}")
    # a barrier, on another group of the same timeout
    if rank == 1:
        t0 = time.monotonic()
        expect(tutti.Timeout, ["Timed out", "rank 1", "barrier #1", "rank 0"], lambda: dist.barrier(group=g),
               regex=" (Timed out|closed|timeout) ")
        took = time.monotonic() - t0
        ok(0.9 <= took < 6, f"barrier timed out after {took:.2f} s")
    # the timeout of a wait (Work.wait), on a third group
    if rank == 0:
        w = dist.irecv(torch.zeros(1), 1, group=h, tag=3)
        expect(tutti.Timeout, ["Timed out", "rank 0", "recv", "200 ms"],
               lambda: w.wait(datetime.timedelta(milliseconds=200)))
    time.sleep(2.5)  # every rank's timeouts are over before any leaves


# ---- monitored_barrier ----------------------------------------------------------

def monitored_part():
    init()
    mb = dist.monitored_barrier
    sec = datetime.timedelta
    # Groups are made while every rank is here. A rank's k-th call pairs
    # with rank 0's k-th call on the same group (as with gloo), so each
    # step where some ranks stay out has a group of its own.
    store = dist.FileStore(store_file + ".monitored", n)
    g = dist.new_group([0, 1])
    late = dist.new_group(list(range(n)))
    left = dist.new_group(list(range(n)))
    mb(timeout=sec(seconds=10))
    mb(timeout=sec(seconds=10), wait_all_ranks=True)
    dist.barrier()
    # Only rank 0 calls, with a timeout of 0: it names every rank that did
    # not arrive.
    if rank == 0:
        missing = ", ".join(str(r) for r in range(1, n))
        expect(tutti.Timeout, ["Rank 0 timed out in monitoredBarrier after 0 ms", "Rank 1 failed to pass",
                               f"ranks that did not arrive: {missing}"], lambda: mb(timeout=sec(0)))
        expect(tutti.Timeout, [f"Ranks {missing} failed to pass monitoredBarrier in 300 ms"],
               lambda: mb(timeout=sec(milliseconds=300), wait_all_ranks=True))
    dist.barrier()
    # Rank 1 does not come: rank 0 names it; the ranks that came hear why.
    if rank == 0:
        expect(tutti.Timeout, ["Rank 1 failed to pass monitoredBarrier in 500 ms"],
               lambda: mb(late, timeout=sec(milliseconds=500)))
    elif rank >= 2:
        expect(tutti.Timeout, [f"Rank {rank} successfully reached monitoredBarrier, but received errors while "
                               "waiting for send/recv from rank 0", "rank 0 reports that rank(s) 1 failed"],
               lambda: mb(late, timeout=sec(milliseconds=500)))
    dist.barrier()
    # A sub-group: non-members return at once.
    if rank == 0:
        expect(tutti.Timeout, ["Rank 1 failed to pass monitoredBarrier"], lambda: mb(g, sec(milliseconds=200)))
    elif rank >= 2:
        mb(g, sec(milliseconds=200))
    dist.barrier()
    # A rank that has already left: the last rank destroys the group and
    # exits; rank 0 names it within moments, not at the 60 s timeout.
    last = n - 1
    if rank == last:
        dist.destroy_process_group()
        print(f"ok {checks}")
        sys.stdout.flush()
        os._exit(0)
    time.sleep(0.5)
    if rank == 0:
        t0 = time.monotonic()
        msg = expect(tutti.PeerLost, [f"Rank {last} failed to pass monitoredBarrier", "left or were lost"],
                     lambda: mb(left, timeout=sec(seconds=60)))
        ok(time.monotonic() - t0 < 10, f"took {time.monotonic() - t0:.1f} s: {msg}")
        store.set("monitored_done", "1")
    else:
        try:
            mb(left, timeout=sec(seconds=60))
        except tutti.Error:
            pass
        # Stay until rank 0 has checked: a rank that exits now is lost too,
        # and rank 0 would name it beside the last rank.
        store.wait(["monitored_done"], sec(seconds=30))



# ---- groups -----------------------------------------------------------------------

def groups_part():
    ok(n == 4 and os.environ.get("TUTTI_TRANSPORT") == "tcp", "the test runs 4 ranks over TCP")
    init()
    cpu = torch.device("cpu")
    world = dist.group.WORLD

    # Sequence numbers: one per operation, the same on every rank.
    b = world._get_backend(cpu)
    s0 = b._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(2))
    dist.broadcast(torch.ones(2), 0)
    ok(b._get_sequence_number_for_group() == s0 + 2, "two operations, two sequence numbers")
    seqs = [None] * n
    dist.all_gather_object(seqs, b._get_sequence_number_for_group())
    ok(len(set(seqs)) == 1, f"sequence numbers agree: {seqs}")

    # new_group: the members derive it from the world's communicator. The
    # world's rendezvous left its keys in the store; a derived group leaves
    # none, and opens no connection outside it.
    ok(met_in_store(world), "the world met through the store")
    dist.barrier()
    before = sockets()
    g = dist.new_group([0, 1])
    if rank < 2:
        ok(not met_in_store(g), "new_group did not meet through the store")
        x = torch.full((1 << 18,), float(rank + 1))
        dist.all_reduce(x, group=g)
        ok(torch.all(x == 3.0).item(), "all_reduce on new_group([0, 1])")
    dist.barrier()
    opened = sockets() - before
    if rank < 2:
        ok(opened <= 1, f"a member opened {opened} sockets (at most one, to the other member)")
    else:
        ok(opened == 0, f"a rank outside the group opened {opened} sockets")

    # split_group (torch 2.13 refuses it on CPU before it asks the backend;
    # tutti.torch lets it through for tutti groups).
    parts = dist.split_group(split_ranks=[[0, 1], [2, 3]])
    mine = [0, 1] if rank < 2 else [2, 3]
    ok(dist.get_process_group_ranks(parts) == mine, f"split_group's ranks {dist.get_process_group_ranks(parts)}")
    ok(not met_in_store(parts), "split_group did not meet through the store")
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=parts)
    ok(x.item() == sum(mine), f"all_reduce on the split {mine}: {x}")
    middle = dist.split_group(split_ranks=[[1, 2]])
    ok((middle is None) == (rank in (0, 3)), "ranks left out of every split get None")
    if middle is not None:
        y = torch.tensor([float(rank * 10)])
        dist.broadcast(y, src=2, group=middle)
        ok(y.item() == 20.0, f"broadcast on split [1, 2] from global rank 2: {y}")
    # a split of a split: group ranks of the parent
    halves = dist.split_group(parent_pg=parts, split_ranks=[[0], [1]])
    ok(dist.get_world_size(halves) == 1, "split of a split")
    dist.barrier()

    # set_timeout: a group whose operations give up after 300 ms.
    h = dist.new_group(list(range(n)))
    h.set_timeout(datetime.timedelta(milliseconds=300))
    if rank == 0:
        t0 = time.monotonic()
        expect(tutti.Timeout, ["Timed out", "all_reduce"], lambda: dist.all_reduce(torch.ones(4), group=h))
        ok(time.monotonic() - t0 < 5, f"set_timeout(300 ms): gave up after {time.monotonic() - t0:.2f} s")
    dist.barrier()

    # shrink_group leaving out a live rank: the others alone make the group.
    sub = dist.new_group(list(range(n)))
    if rank != 3:
        small = dist.shrink_group([3], group=sub)
        ok(dist.get_process_group_ranks(small) == [0, 1, 2], "shrink_group's ranks")
        z = torch.tensor([float(rank + 1)])
        dist.all_reduce(z, group=small)
        ok(z.item() == 6.0, f"all_reduce on the shrunk group: {z}")
    dist.barrier()

    # A killed rank (1, so that the survivors' numbers change), then
    # shrink_group of the default group: the survivors carry on in a new
    # default group, numbered 0, 1, 2 as global ranks 0, 2, 3 were.
    if rank == 1:
        print(f"ok {checks}")
        sys.stdout.flush()
        os._exit(0)
    expect(tutti.Error, ["rank 1"], lambda: dist.all_reduce(torch.ones(1 << 16)))
    ok(isinstance(tutti.torch.error(), (tutti.PeerLost, tutti.Revoked, tutti.Mismatch, tutti.Timeout)),
       f"error state: {tutti.torch.error()!r}")
    dist.shrink_group([1])
    now = {0: 0, 2: 1, 3: 2}[rank]
    ok(dist.get_world_size() == 3 and dist.get_rank() == now, f"the default group is the survivors: {dist.get_rank()}")
    w = torch.full((1000,), float(rank + 1))
    dist.all_reduce(w)
    ok(torch.all(w == 8.0).item(), f"all_reduce after shrink_group: {w[:3]}")
    ok(tutti.torch.error() is None, "the new default group works")
    # new_group after it, in the new numbering: old ranks 2 and 3.
    last = dist.new_group([1, 2])
    if now in (1, 2):
        v = torch.tensor([float(rank)])
        dist.all_reduce(v, group=last)
        ok(v.item() == 5.0, f"all_reduce on new_group([1, 2]) after the shrink: {v}")
    dist.barrier()


{"env": env_part, "profiling": profiling_part, "sparse": sparse_part, "timeouts": timeouts_part,
 "monitored": monitored_part, "groups": groups_part}[part]()
if dist.is_initialized():
    dist.destroy_process_group()
print(f"ok {checks}")
sys.stdout.flush()
