"""One rank of the multi-rank tests of the torch.distributed backend
(test_torch_backend.py).

Every operation torch.distributed 2.13 routes to a CPU backend, on CPU
tensors of every dtype tutti supports with every reduce op that means
something for it (AVG and PREMUL_SUM included), contiguous and not, on the
default group, on a group that runs every operation asynchronously
(TUTTI_TORCH_INLINE_BYTES=0) and on sub-groups: the collectives and their
coalesced forms (torch's coalescing manager too), point-to-point and
batch_isend_irecv; async Work (wait, is_completed, is_success, exception,
get_future); bad input. Inputs are random (never zero) and a function of
(rank, case); every element is checked. Prints "ok <cases>" at the end.

  torch_worker.py                        every operation (env:// init)
  torch_worker.py inits FILE PORT x 5    the default group made every other
      way, one after the other: tcp://, file://FILE, a TCPStore passed to
      init_process_group, backend "cpu:tutti", and a tutti group in a gloo
      world
"""
import datetime
import os
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _make_nccl_premul_sum

import tutti
import tutti.torch

warnings.filterwarnings("ignore", message=".*will be deprecated.*")
torch.set_num_threads(1)
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
def make_group(how, port):
    """The default group, made one of the ways torch offers (MASTER_PORT:
    `port`)."""
    os.environ["MASTER_PORT"] = str(port)
    if how == "env":
        dist.init_process_group("tutti", init_method="env://", rank=rank, world_size=n)
    elif how == "tcp":
        dist.init_process_group("tutti", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    elif how.startswith("file:"):
        dist.init_process_group("tutti", init_method="file://" + how[5:], rank=rank, world_size=n)
    elif how == "store":
        store = dist.TCPStore("127.0.0.1", int(port), n, rank == 0, timeout=datetime.timedelta(seconds=60))
        dist.init_process_group("tutti", store=store, rank=rank, world_size=n)
    elif how == "cpu":
        dist.init_process_group(backend="cpu:tutti", init_method="env://", rank=rank, world_size=n)
    elif how == "gloo-world":
        # A gloo world with a tutti group in it (new_group(backend="tutti")):
        # the group meets through the store.
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=n)
    else:
        raise SystemExit(f"unknown init method {how}")
    assert dist.get_rank() == rank and dist.get_world_size() == n


def check_group(how):
    """A group made by make_group(how) works; it is destroyed after."""
    if how == "gloo-world":
        g = dist.new_group(list(range(n)), backend="tutti")
        assert dist.get_backend(g) == "tutti" and tutti.torch.inline_bytes(g) is not None
        x = torch.arange(10, dtype=torch.float64) * (rank + 1)
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.arange(10, dtype=torch.float64) * (n * (n + 1) // 2)), x
        outs = [torch.zeros(3, dtype=torch.int32) for _ in range(n)]
        dist.all_gather(outs, torch.full((3,), rank, dtype=torch.int32), group=g)
        assert [o.tolist() for o in outs] == [[r] * 3 for r in range(n)], outs
        dist.barrier(group=g)
    else:
        assert dist.get_backend() == ("cpu:tutti" if how == "cpu" else "tutti"), dist.get_backend()
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        assert t.item() == n * (n + 1) / 2, t
        dist.barrier()
    dist.destroy_process_group()
    print(f"ok {how.split(':')[0]}")


if len(sys.argv) > 1 and sys.argv[1] == "inits":
    # Every way, one after the other in these processes: inits FILE PORT...
    for how, port in zip(["tcp", "file:" + sys.argv[2], "store", "cpu", "gloo-world"], sys.argv[3:], strict=True):
        make_group(how, port)
        check_group(how)
    sys.exit(0)
make_group("env", os.environ["MASTER_PORT"])

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
R = dist.ReduceOp
OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]
cases = 0


def is_int(dt):
    return dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def data(dt, shape, r, case, prod=False):
    g = torch.Generator().manual_seed(1000003 * case + 7919 * r + 11)
    count = 1
    for s in shape:
        count *= s
    if dt == torch.bool:
        return (torch.rand(count, generator=g) < 0.5).reshape(shape)
    if is_int(dt):
        lo, hi = (1, 4) if prod else (1, 40)
        v = torch.randint(lo, hi, (count,), generator=g)
        if dt != torch.uint8:
            v = v * torch.where(torch.rand(count, generator=g) < 0.5, -1, 1)
        return v.to(dt).reshape(shape)
    if dt.is_complex:
        re = torch.rand(count, generator=g, dtype=torch.float64) + 0.5
        im = torch.rand(count, generator=g, dtype=torch.float64) + 0.5
        return torch.complex(re, im).to(dt).reshape(shape)
    v = torch.rand(count, generator=g, dtype=torch.float64)
    v = (v + 0.5) if prod else (v * 8 - 4)
    v[v == 0] = 0.25
    return v.to(dt).reshape(shape)


def eps(dt):
    if dt == torch.bool or is_int(dt):
        return 0.0
    real = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dt, dt)
    return torch.finfo(real).eps


def wide(t):
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype == torch.bool or is_int(t.dtype):
        return t.to(torch.int64)
    return t.to(torch.float64)


def reference(dt, op, xs, m, scalar=None):
    """(want, tol) for the reduction of xs over m ranks."""
    vs = torch.stack([wide(x) for x in xs])
    if dt == torch.bool:
        b = vs != 0
        if op in (R.SUM, R.MAX, R.BOR):
            return b.any(0), None
        if op in (R.PRODUCT, R.MIN, R.BAND):
            return b.all(0), None
        return (b.sum(0) % 2) == 1, None
    mag = None
    if scalar is not None:
        w, mag = (vs * scalar).sum(0), (vs.abs() * abs(scalar)).sum(0)
    elif op == R.SUM:
        w, mag = vs.sum(0), vs.abs().sum(0)
    elif op == R.PRODUCT:
        w, mag = vs.prod(0), vs.abs().prod(0)
    elif op == R.MIN:
        w = vs.min(0).values
    elif op == R.MAX:
        w = vs.max(0).values
    elif op == R.AVG:
        s = vs.sum(0)
        w = torch.div(s, m, rounding_mode="trunc") if is_int(dt) else s / m
        mag = vs.abs().sum(0) / m
    elif op == R.BAND:
        w = vs[0]
        for v in vs[1:]:
            w = w & v
    elif op == R.BOR:
        w = vs[0]
        for v in vs[1:]:
            w = w | v
    else:
        w = vs[0]
        for v in vs[1:]:
            w = w ^ v
    if is_int(dt):
        return w.to(dt).to(torch.int64), None  # wraps like the dtype
    if mag is None:
        return w, 0.0
    return w, (m + 2) * eps(dt) * mag + 1e-300


def check(what, got, want, tol=None):
    global cases
    cases += 1
    g = wide(got)
    want = want.reshape(g.shape) if want.numel() == g.numel() else want
    if got.dtype == torch.bool:
        bad = (g != 0) != (want != 0)
    elif tol is None:
        bad = g != wide(want)
    else:
        bad = ~((g - want).abs() <= tol)
    if bad.any() or g.shape != want.shape:
        i = int(bad.reshape(-1).to(torch.int8).argmax()) if bad.any() else 0
        raise AssertionError(f"rank {rank}: {what} ({got.dtype}): {int(bad.sum())} wrong elements of {g.numel()}; "
                             f"first at {i}: got {g.reshape(-1)[i].item()!r}, "
                             f"want {want.reshape(-1)[i].item()!r}; shapes {tuple(g.shape)} {tuple(want.shape)}")


def valid_ops(dt):
    out = []
    for op in OPS:
        if dt == torch.bool and op == R.AVG:
            continue
        if (dt.is_floating_point or dt.is_complex) and op in (R.BAND, R.BOR, R.BXOR):
            continue
        if dt.is_complex and op in (R.MIN, R.MAX):
            continue
        out.append((op, None))
    if dt != torch.bool:
        out.append(("premul", 2.0 if is_int(dt) else 0.5))
        if dt.is_floating_point:
            out.append(("premul_tensor", 0.25))
    return out


def make_op(op, scalar):
    if isinstance(op, str) and op == "premul":
        return _make_nccl_premul_sum(scalar)
    if isinstance(op, str) and op == "premul_tensor":
        return _make_nccl_premul_sum(torch.tensor([scalar], dtype=torch.float64))
    return op


def strided(t):
    """A non-contiguous tensor holding the values of t (every other column of a wider one)."""
    wide_ = torch.zeros((t.numel(), 2), dtype=t.dtype)
    v = wide_[:, 1]
    v.copy_(t.reshape(-1))
    assert v.numel() <= 1 or not v.is_contiguous()
    return v


def pg_of(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def wait(w, async_):
    if async_:
        w.wait()
        # all_reduce_coalesced(async_op=True) returns the Work's future
        assert w.done() if hasattr(w, "done") else w.is_completed()


def collectives(group, tag):
    """Every collective on `group` (None: the default group)."""
    m = dist.get_world_size(group)
    me = dist.get_rank(group)
    g2w = [dist.distributed_c10d.get_global_rank(group, r) if group is not None else r for r in range(m)]
    case = 0
    for dt in DTYPES:
        for async_ in (False, True):
            for contiguous in (True, False):
                mode = f"{tag} {'async' if async_ else 'sync'} {'contiguous' if contiguous else 'strided'}"
                view = (lambda t: t) if contiguous else strided
                shape = (6,)

                # broadcast from every root
                for root in range(m):
                    case += 1
                    t = view(data(dt, shape, me, case) if me == root else torch.zeros(shape, dtype=dt))
                    wait(dist.broadcast(t, src=g2w[root], group=group, async_op=async_), async_)
                    check(f"{mode} broadcast root {root}", t, data(dt, shape, root, case))

                # reductions: torch's Python layer passes complex tensors as
                # real views, and refuses PRODUCT on them: those go to the
                # process group directly below.
                for op, scalar in valid_ops(dt):
                    prod = scalar is None and op == R.PRODUCT
                    if dt.is_complex and prod:
                        continue
                    case += 1
                    xs = [data(dt, shape, r, case, prod) for r in range(m)]
                    want, tol = reference(dt, op, xs, m, scalar)
                    rop = make_op(op, scalar)
                    name = str(op) if scalar is None else f"{op}({scalar})"
                    t = view(xs[me].clone())
                    wait(dist.all_reduce(t, op=rop, group=group, async_op=async_), async_)
                    check(f"{mode} all_reduce {name}", t, want, tol)
                    root = case % m
                    t = view(xs[me].clone())
                    wait(dist.reduce(t, dst=g2w[root], op=rop, group=group, async_op=async_), async_)
                    if me == root:
                        check(f"{mode} reduce {name} root {root}", t, want, tol)
                    else:
                        check(f"{mode} reduce {name} non-root input untouched", t, xs[me])
                    # reduce_scatter: list and tensor forms
                    ins = [data(dt, shape, r * 100 + me, case, prod) for r in range(m)]
                    mine = [data(dt, shape, me * 100 + s, case, prod) for s in range(m)]
                    w2, t2 = reference(dt, op, mine, m, scalar)
                    out = view(torch.zeros(shape, dtype=dt))
                    wait(dist.reduce_scatter(out, [view(x.clone()) for x in ins], op=rop, group=group,
                                             async_op=async_), async_)
                    check(f"{mode} reduce_scatter {name}", out, w2, t2)
                    out = view(torch.zeros(shape, dtype=dt))
                    flat = view(torch.cat(ins))
                    wait(dist.reduce_scatter_tensor(out, flat, op=rop, group=group, async_op=async_), async_)
                    check(f"{mode} reduce_scatter_tensor {name}", out, w2, t2)
                    # all_reduce_coalesced: two tensors of this dtype
                    ys = [data(dt, (3,), r, case + 50000, prod) for r in range(m)]
                    want_y, tol_y = reference(dt, op, ys, m, scalar)
                    a, b = view(xs[me].clone()), view(ys[me].clone())
                    w = dist.all_reduce_coalesced([a, b], op=rop, group=group, async_op=async_)
                    wait(w, async_)
                    check(f"{mode} all_reduce_coalesced {name} [0]", a, want, tol)
                    check(f"{mode} all_reduce_coalesced {name} [1]", b, want_y, tol_y)

                # gathers
                case += 1
                mine = data(dt, shape, me, case)
                every = [data(dt, shape, r, case) for r in range(m)]
                outs = [view(torch.zeros(shape, dtype=dt)) for _ in range(m)]
                wait(dist.all_gather(outs, view(mine.clone()), group=group, async_op=async_), async_)
                for r in range(m):
                    check(f"{mode} all_gather [{r}]", outs[r], every[r])
                out = view(torch.zeros((m * shape[0],), dtype=dt))
                wait(dist.all_gather_into_tensor(out, view(mine.clone()), group=group, async_op=async_), async_)
                check(f"{mode} all_gather_into_tensor", out, torch.cat(every))
                extra = data(dt, (2, 2), me, case + 60000)
                lists = [[view(torch.zeros(shape, dtype=dt)), torch.zeros((2, 2), dtype=dt)] for _ in range(m)]
                wait(dist.all_gather_coalesced(lists, [view(mine.clone()), extra], group=group,
                                               async_op=async_), async_)
                for r in range(m):
                    check(f"{mode} all_gather_coalesced [{r}][0]", lists[r][0], every[r])
                    check(f"{mode} all_gather_coalesced [{r}][1]", lists[r][1], data(dt, (2, 2), r, case + 60000))
                for root in range(m):
                    gl = [view(torch.zeros(shape, dtype=dt)) for _ in range(m)] if me == root else None
                    wait(dist.gather(view(mine.clone()), gather_list=gl, dst=g2w[root], group=group,
                                     async_op=async_), async_)
                    if me == root:
                        for r in range(m):
                            check(f"{mode} gather root {root} [{r}]", gl[r], every[r])
                    src = [data(dt, shape, root * 10 + r, case + 70000) for r in range(m)]
                    out = view(torch.zeros(shape, dtype=dt))
                    wait(dist.scatter(out, scatter_list=[view(s.clone()) for s in src] if me == root else None,
                                      src=g2w[root], group=group, async_op=async_), async_)
                    check(f"{mode} scatter root {root}", out, src[me])

                # all_to_all_single: equal splits, then uneven ones (rank s
                # sends s + r + 1 rows of 2 to rank r)
                case += 1
                ins = [data(dt, (m * 2, 3), r, case) for r in range(m)]
                out = torch.zeros((m * 2, 3), dtype=dt)
                src_t = ins[me].clone()
                if not contiguous:
                    src_t = ins[me].t().contiguous().t()
                    assert not src_t.is_contiguous()
                wait(dist.all_to_all_single(out, src_t, group=group, async_op=async_), async_)
                check(f"{mode} all_to_all_single", out, torch.cat([ins[s][me * 2:(me + 1) * 2] for s in range(m)]))
                cnt = lambda s, r: s + r + 1  # noqa: E731
                srcs = [data(dt, (sum(cnt(s, r) for r in range(m)), 2), s, case + 80000) for s in range(m)]
                out = torch.zeros((sum(cnt(s, me) for s in range(m)), 2), dtype=dt)
                wait(dist.all_to_all_single(out, srcs[me].clone(), output_split_sizes=[cnt(s, me) for s in range(m)],
                                            input_split_sizes=[cnt(me, r) for r in range(m)], group=group,
                                            async_op=async_), async_)
                want = []
                for s in range(m):
                    off = sum(cnt(s, r) for r in range(me))
                    want.append(srcs[s][off:off + cnt(s, me)])
                check(f"{mode} all_to_all_single splits", out, torch.cat(want))
                # all_to_all with lists of different sizes
                ins = [data(dt, (cnt(me, r),), me * 10 + r, case + 90000) for r in range(m)]
                outs = [view(torch.zeros((cnt(s, me),), dtype=dt)) for s in range(m)]
                wait(dist.all_to_all(outs, [view(x) for x in ins], group=group, async_op=async_), async_)
                for s in range(m):
                    check(f"{mode} all_to_all [{s}]", outs[s], data(dt, (cnt(s, me),), s * 10 + me, case + 90000))

        # complex PRODUCT, which torch's Python layer refuses, straight on the process group
        if dt.is_complex:
            case += 1
            xs = [data(dt, (4,), r, case, True) for r in range(m)]
            want, tol = reference(dt, R.PRODUCT, xs, m)
            t = xs[me].clone()
            opts = dist.AllreduceOptions()
            opts.reduceOp = R.PRODUCT
            pg_of(group).allreduce([t], opts).wait()
            check(f"{tag} pg.allreduce PRODUCT", t, want, tol)
    wait(dist.barrier(group=group, async_op=True), True)
    dist.barrier(group=group)


def point_to_point(group, tag):
    m = dist.get_world_size(group)
    me = dist.get_rank(group)
    if m < 2:
        return
    g2w = [dist.distributed_c10d.get_global_rank(group, r) if group is not None else r for r in range(m)]
    nxt, prv = (me + 1) % m, (me - 1) % m
    for i, dt in enumerate(DTYPES):
        for contiguous in (True, False):
            view = (lambda t: t) if contiguous else strided
            x = data(dt, (5,), me, 5000 + i)
            y = view(torch.zeros((5,), dtype=dt))
            ws = dist.isend(view(x.clone()), g2w[nxt], group=group, tag=i)
            wr = dist.irecv(y, g2w[prv], group=group, tag=i)
            ws.wait()
            wr.wait()
            check(f"{tag} isend/irecv", y, data(dt, (5,), prv, 5000 + i))
    # blocking send/recv; recv from any source returns the sender
    if me == 0:
        got = set()
        for _ in range(m - 1):
            buf = torch.zeros(2, dtype=torch.int64)
            src = dist.recv(buf, group=group)
            got.add(src)
            check(f"{tag} recv any source", buf, torch.tensor([src, 7]))
        assert got == set(g2w[1:]), got
    else:
        dist.send(torch.tensor([g2w[me], 7]), g2w[0], group=group)
    dist.barrier(group=group)


def coalescing(group, tag):
    """The coalesced forms torch 2.13 has: torch's coalescing manager over
    all_reduce, all_gather_into_tensor and reduce_scatter_tensor (they reach
    the backend as allreduce_coalesced, allgather_into_tensor_coalesced and
    reduce_scatter_tensor_coalesced), the same with the backend's own
    coalescing (a device given), all_gather_single and reduce_scatter_single,
    and batch_isend_irecv."""
    m = dist.get_world_size(group)
    me = dist.get_rank(group)
    g2w = [dist.distributed_c10d.get_global_rank(group, r) if group is not None else r for r in range(m)]
    cm_ = dist.distributed_c10d._coalescing_manager
    for case, (dt, async_, device) in enumerate(
            [(dt, a, d) for dt in (torch.float32, torch.bfloat16, torch.int64) for a in (False, True)
             for d in (None, torch.device("cpu"))], start=700000):
        mode = f"{tag} {dt} {'async' if async_ else 'sync'} device={device}"
        # all_reduce: three tensors of different shapes, one of them strided
        shapes = [(5,), (2, 3), (7,)]
        xs = [[data(dt, sh, r, case * 10 + i) for r in range(m)] for i, sh in enumerate(shapes)]
        mine = [xs[i][me].clone() for i in range(len(shapes))]
        mine[2] = strided(mine[2])
        with cm_(group=group, device=device, async_ops=async_) as cm:
            for t in mine:
                dist.all_reduce(t, group=group, async_op=async_)
        if async_:
            cm.wait()
        for i, t in enumerate(mine):
            want, tol = reference(dt, R.SUM, xs[i], m)
            check(f"{mode} coalesced all_reduce [{i}]", t, want, tol)
        # all_gather_into_tensor: two outputs
        ins = [data(dt, (3,), me, case + 1), data(dt, (2, 2), me, case + 2)]
        outs = [torch.zeros((3 * m,), dtype=dt), torch.zeros((2 * m, 2), dtype=dt)]
        with cm_(group=group, device=device, async_ops=async_) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i, group=group, async_op=async_)
        if async_:
            cm.wait()
        check(f"{mode} coalesced all_gather_into_tensor [0]", outs[0],
              torch.cat([data(dt, (3,), r, case + 1) for r in range(m)]))
        check(f"{mode} coalesced all_gather_into_tensor [1]", outs[1],
              torch.cat([data(dt, (2, 2), r, case + 2) for r in range(m)]))
        # reduce_scatter_tensor: two inputs
        sizes = [4, 3]
        full = [[data(dt, (sz * m,), r, case + 3 + i) for r in range(m)] for i, sz in enumerate(sizes)]
        outs = [torch.zeros((sz,), dtype=dt) for sz in sizes]
        with cm_(group=group, device=device, async_ops=async_) as cm:
            for i, o in enumerate(outs):
                dist.reduce_scatter_tensor(o, full[i][me].clone(), group=group, async_op=async_)
        if async_:
            cm.wait()
        for i, sz in enumerate(sizes):
            want, tol = reference(dt, R.SUM, [f[me * sz:(me + 1) * sz] for f in full[i]], m)
            check(f"{mode} coalesced reduce_scatter_tensor [{i}]", outs[i], want, tol)
    # torch 2.13's names of the tensor forms
    x = data(torch.float32, (4,), me, 710000)
    out = torch.zeros(4 * m)
    dist.all_gather_single(out, x, group=group)
    check(f"{tag} all_gather_single", out, torch.cat([data(torch.float32, (4,), r, 710000) for r in range(m)]))
    full = [data(torch.float64, (2 * m,), r, 710001) for r in range(m)]
    out = torch.zeros(2, dtype=torch.float64)
    dist.reduce_scatter_single(out, full[me].clone(), group=group)
    want, tol = reference(torch.float64, R.SUM, [f[me * 2:(me + 1) * 2] for f in full], m)
    check(f"{tag} reduce_scatter_single", out, want, tol)
    if m < 2:
        return
    # batch_isend_irecv: a ring both ways, two tensors each way, with tags
    nxt, prv = (me + 1) % m, (me - 1) % m
    for case in range(720000, 720004):
        dt = DTYPES[case % len(DTYPES)]
        got = {(peer, k): torch.zeros((3 + k,), dtype=dt) for peer in (nxt, prv) for k in range(2)}
        ops = []
        for k in range(2):
            ops.append(dist.P2POp(dist.irecv, got[(prv, k)], g2w[prv], group=group, tag=k))
            ops.append(dist.P2POp(dist.isend, data(dt, (3 + k,), me * 10 + nxt, case + k), g2w[nxt], group=group, tag=k))
            if m > 2:
                ops.append(dist.P2POp(dist.isend, data(dt, (3 + k,), me * 10 + prv, case + k + 2), g2w[prv],
                                      group=group, tag=k + 2))
                ops.append(dist.P2POp(dist.irecv, got[(nxt, k)], g2w[nxt], group=group, tag=k + 2))
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        for k in range(2):
            check(f"{tag} batch_isend_irecv from prev [{k}]", got[(prv, k)], data(dt, (3 + k,), prv * 10 + me, case + k))
            if m > 2:
                check(f"{tag} batch_isend_irecv from next [{k}]", got[(nxt, k)],
                      data(dt, (3 + k,), nxt * 10 + me, case + k + 2))
    dist.barrier(group=group)


def futures(group, tag):
    """get_future on finished and on pending Works; then(); result()."""
    m = dist.get_world_size(group)
    t = torch.ones(300000) * (dist.get_rank(group) + 1)  # 1.2 MB: asynchronous in any group
    w = dist.all_reduce(t, group=group, async_op=True)
    fut = w.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    res = fut.wait()
    assert isinstance(res, list) and res[0] is not None
    check(f"{tag} future value", res[0], torch.full((300000,), m * (m + 1) / 2, dtype=torch.float64), 0.0)
    check(f"{tag} future then", chained.wait(), torch.full((300000,), float(m * (m + 1)), dtype=torch.float64), 0.0)
    assert w.is_completed() and w.is_success() and w.exception() is None
    small = torch.ones(3)
    w = dist.all_reduce(small, group=group, async_op=True)
    w.wait()
    f2 = w.get_future()
    assert f2.done()
    check(f"{tag} future of a finished Work", f2.value()[0], torch.full((3,), float(m), dtype=torch.float64), 0.0)
    # a pending receive ahead of a collective does not hold the collective's future back
    if m >= 2:
        me = dist.get_rank(group)
        buf = torch.zeros(4)
        g2w = [dist.distributed_c10d.get_global_rank(group, r) if group is not None else r for r in range(m)]
        wr = dist.irecv(buf, g2w[(me - 1) % m], group=group, tag=99)
        fr = wr.get_future()
        big = torch.ones(300000)
        fa = dist.all_reduce(big, group=group, async_op=True).get_future()
        fa.wait()
        assert not fr.done()
        dist.barrier(group=group)  # every rank has looked before anyone sends
        dist.send(torch.full((4,), float(me)), g2w[(me + 1) % m], group=group, tag=99)
        fr.wait()
        check(f"{tag} irecv future", buf, torch.full((4,), float((me - 1) % m)))


def monitored():
    pg = pg_of(None)
    pg.monitored_barrier(datetime.timedelta(seconds=30), False)
    pg.monitored_barrier(datetime.timedelta(seconds=30), True)
    if n >= 2:
        # rank 1 arrives late: rank 0 names it
        if rank == 0:
            try:
                pg.monitored_barrier(datetime.timedelta(milliseconds=300), False)
                raise AssertionError("expected a Timeout from monitored_barrier")
            except tutti.Timeout as e:
                assert "Rank 1 failed to pass monitoredBarrier in 300 ms" in str(e), str(e)
        dist.barrier()


def errors():
    def expect(cls, words, f):
        try:
            f()
        except cls as e:
            for w in words:
                assert w in str(e), (w, str(e))
            return
        raise AssertionError(f"rank {rank}: expected {cls.__name__} {words}")

    t = torch.ones(4)
    # Errors of tutti raised through torch.distributed keep their kind.
    expect(tutti.InvalidArgument, ["allreduce", "band on float32 is meaningless"],
           lambda: dist.all_reduce(t, op=R.BAND))
    expect(tutti.InvalidArgument, ["_allgather_base", f"expected {4 * n}"],
           lambda: dist.all_gather_into_tensor(torch.zeros(3 * n + 1 if n > 1 else 3), torch.ones(4)))
    expect(tutti.InvalidArgument, ["tag -1"], lambda: dist.isend(t, 0, tag=-1))
    # Bad input is refused on the calling rank, naming the argument.
    expect(tutti.InvalidArgument, ["_allgather_base", "the output has dtype Double, expected Float"],
           lambda: dist.all_gather_into_tensor(torch.zeros(4 * n, dtype=torch.float64), torch.ones(4)))
    expect(tutti.InvalidArgument, ["_reduce_scatter_base", "the input has dtype Int, expected Float"],
           lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.zeros(2 * n, dtype=torch.int32)))
    expect(ValueError, ["different dtypes"],
           lambda: dist.all_gather([torch.zeros(4, dtype=torch.int64) for _ in range(n)], torch.ones(4)))
    # torch's dispatcher sends tensors of other devices to other backends
    # (meta tensors to its meta kernels): called on the backend itself, such
    # a tensor is refused.
    cpu_backend = pg_of(None)._get_backend(torch.device("cpu"))
    expect(tutti.InvalidArgument, ["allreduce", "the tensor is on device meta"],
           lambda: cpu_backend.allreduce([torch.empty(4, device="meta")], dist.AllreduceOptions()))
    outs = [torch.zeros(4) for _ in range(n)]
    outs[n - 1] = torch.empty(4, device="meta")
    expect(tutti.InvalidArgument, ["allgather", f"output {n - 1} is on device meta"],
           lambda: cpu_backend.allgather([outs], [torch.ones(4)], dist.distributed_c10d.AllgatherOptions()))
    # Sizes that disagree between ranks: every rank fails at once, naming both calls.
    if n > 1:
        bad = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=60))
        t0 = time.monotonic()
        count = 1000 + (1 if rank == n - 1 else 0)
        expect(tutti.Mismatch, ["all_reduce (4000 B", "all_reduce (4004 B", "at the same point"],
               lambda: dist.all_reduce(torch.ones(count), group=bad))
        assert time.monotonic() - t0 < 10, time.monotonic() - t0
    # Timeout: a group with a short timeout where rank 1 never joins an all_reduce.
    g = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=5))
    if rank == 0 and n > 1:
        t0 = time.monotonic()
        expect(tutti.Timeout, ["all_reduce", "Timed out waiting for rank"], lambda: dist.all_reduce(torch.ones(8), group=g))
        assert time.monotonic() - t0 < 20
        # later operations on that group fail at once; the Work carries the error
        w = dist.all_reduce(torch.ones(8), group=g, async_op=True)
        assert w.is_completed() and not w.is_success()
        e = w.exception()
        assert isinstance(e, RuntimeError) and "Timeout" in str(e) and "all_reduce" in str(e), repr(e)
        expect(tutti.Error, ["all_reduce"], w.wait)
        assert isinstance(tutti.torch.error(g), tutti.Timeout), repr(tutti.torch.error(g))
    dist.barrier()
    # wait(timeout) on a receive not matched yet: Timeout, and the receive goes on
    h = dist.new_group(list(range(n)))
    buf = torch.zeros(1)
    if rank == 0 and n > 1:
        w = dist.irecv(buf, 1, group=h, tag=5)
        expect(tutti.Timeout, ["did not finish within the wait's timeout of 200 ms"],
               lambda: w.wait(datetime.timedelta(milliseconds=200)))
        assert not w.is_completed() and w.exception() is None
    dist.barrier()
    if rank == 1:
        dist.send(torch.tensor([3.0]), 0, group=h, tag=5)
    if rank == 0 and n > 1:
        w.wait()
        assert w.is_completed() and buf.item() == 3.0
    dist.barrier()


def gil():
    """Blocking torch.distributed calls on a tutti group release the GIL."""
    if n < 2:
        return
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    if rank == 0:
        time.sleep(0.3)
        dist.send(torch.tensor([5.0]), 1)
    elif rank == 1:
        before = ticks[0]
        buf = torch.zeros(1)
        dist.recv(buf, 0)
        assert ticks[0] - before >= 20, ticks[0] - before
    stop.set()
    th.join()
    dist.barrier()


# The default group runs small operations inline; this group runs every
# operation on tutti's worker thread (futures completed by the completion thread).
os.environ["TUTTI_TORCH_INLINE_BYTES"] = "0"
async_group = dist.new_group(list(range(n)))
del os.environ["TUTTI_TORCH_INLINE_BYTES"]
assert tutti.torch.inline_bytes(async_group) == 0
assert tutti.torch.inline_bytes(pg_of(None)) == 256 << 10

collectives(None, "world")
collectives(async_group, "async group")
point_to_point(None, "world")
point_to_point(async_group, "async group")
futures(None, "world")
futures(async_group, "async group")
coalescing(None, "world")
coalescing(async_group, "async group")
# sub-groups: the odd ranks, and the last two in reverse order
odd = list(range(1, n, 2)) or [0]
sub = dist.new_group(odd)
if rank in odd:
    collectives(sub, f"new_group({odd})")
    point_to_point(sub, f"new_group({odd})")
    coalescing(sub, f"new_group({odd})")
rev = [n - 1, 0] if n > 1 else [0]
sub2 = dist.new_group(rev)
if rank in rev:
    point_to_point(sub2, f"new_group({rev})")
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=sub2)
    check("new_group(reversed) all_reduce", x, torch.tensor([float(sum(set(rev)))]))
dist.barrier()
monitored()
gil()
errors()
dist.destroy_process_group()
print(f"ok {cases}")
sys.stdout.flush()
