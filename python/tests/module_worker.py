"""One rank of the multi-rank tests of the tutti module (test_module.py).

Every operation, blocking and async, on numpy arrays of every dtype with
every reduce op that means something for it, contiguous and list forms,
sub-groups, point to point with any source, stores, errors, and the GIL
released while waiting. Inputs are random (never zero) and a function of
(rank, case), so every rank computes every expected output; every element is
checked. Prints "ok <cases>" at the end; any failure raises (exit status 1).
"""
import os
import sys
import threading
import time

import numpy as np

import tutti

rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
comm = tutti.init(timeout=60)
assert comm.rank == rank and comm.size == n, (comm.rank, comm.size)

# numpy dtype per tutti dtype (bfloat16: uint16 bits with dtype=tutti.bfloat16).
NP = {
    tutti.int8: np.int8, tutti.uint8: np.uint8, tutti.int16: np.int16, tutti.int32: np.int32,
    tutti.uint32: np.uint32, tutti.int64: np.int64, tutti.uint64: np.uint64, tutti.float16: np.float16,
    tutti.bfloat16: np.uint16, tutti.float32: np.float32, tutti.float64: np.float64, tutti.bool: np.bool_,
    tutti.complex64: np.complex64, tutti.complex128: np.complex128,
}
DTYPES = list(NP)
OPS = [tutti.SUM, tutti.PRODUCT, tutti.MIN, tutti.MAX, tutti.AVG, tutti.BAND, tutti.BOR, tutti.BXOR]
cases = 0


def is_int(dt):
    return dt in (tutti.int8, tutti.uint8, tutti.int16, tutti.int32, tutti.uint32, tutti.int64, tutti.uint64)


def is_float(dt):
    return dt in (tutti.float16, tutti.bfloat16, tutti.float32, tutti.float64)


def bf16_bits(x):
    """float64 -> bfloat16 bits (round to nearest even), as uint16."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def data(dt, count, r, case, op=None):
    """Rank r's input of a case: random, never zero, small enough that sums and
    products stay exact for integers."""
    g = np.random.default_rng([r, case, 7])
    prod = op is not None and op.kind == tutti.ReduceOpKind.PRODUCT
    if dt == tutti.bool:
        return g.random(count) < 0.5
    if is_int(dt):
        lo, hi = (1, 4) if prod else (1, 40)
        v = g.integers(lo, hi, count)
        if dt not in (tutti.uint8, tutti.uint32, tutti.uint64):
            v = v * np.where(g.random(count) < 0.5, -1, 1)
        return v.astype(NP[dt])
    if dt in (tutti.complex64, tutti.complex128):
        v = (g.random(count) + 0.5) + 1j * (g.random(count) + 0.5)
        return v.astype(NP[dt])
    v = (g.random(count) + 0.5) if prod else (g.random(count) * 8 - 4)
    v[v == 0] = 0.25
    if dt == tutti.bfloat16:
        return bf16_bits(v)
    return v.astype(NP[dt])


def value(dt, a):
    """Array -> float64/complex128/int64 values for the reference."""
    if dt == tutti.bfloat16:
        return bf16_value(a)
    if dt == tutti.bool:
        return a.astype(np.int64)
    if dt in (tutti.complex64, tutti.complex128):
        return a.astype(np.complex128)
    if is_int(dt):
        return a.astype(np.int64) if dt != tutti.uint64 else a.astype(np.uint64)
    return a.astype(np.float64)


def eps(dt):
    return {tutti.float16: 2.0 ** -10, tutti.bfloat16: 2.0 ** -7, tutti.float32: 2.0 ** -23,
            tutti.float64: 2.0 ** -52, tutti.complex64: 2.0 ** -23, tutti.complex128: 2.0 ** -52}.get(dt, 0.0)


def reduce_ref(dt, op, xs, m):
    """The reduction of inputs xs (arrays of dt) over m ranks; returns (want, tol)."""
    vs = np.stack([value(dt, x) for x in xs])
    k = op.kind
    K = tutti.ReduceOpKind
    if dt == tutti.bool:
        b = vs != 0
        if k in (K.SUM, K.MAX, K.BOR):
            w = b.any(0)
        elif k in (K.PRODUCT, K.MIN, K.BAND):
            w = b.all(0)
        else:
            w = (b.sum(0) % 2) == 1
        return w, None
    if k == K.SUM:
        w, mag = vs.sum(0), np.abs(vs).sum(0)
    elif k == K.PREMUL_SUM:
        w, mag = (vs * op.scalar).sum(0), (np.abs(vs) * abs(op.scalar)).sum(0)
    elif k == K.PRODUCT:
        w, mag = vs.prod(0), np.abs(vs).prod(0)
    elif k == K.MIN:
        w, mag = vs.min(0), None
    elif k == K.MAX:
        w, mag = vs.max(0), None
    elif k == K.AVG:
        s = vs.sum(0)
        if is_int(dt):
            w = np.trunc(s / m).astype(np.int64) if dt != tutti.uint64 else s // m
        else:
            w = s / m
        mag = np.abs(vs).sum(0) / m
    elif k == K.BAND:
        w, mag = np.bitwise_and.reduce(vs, 0), None
    elif k == K.BOR:
        w, mag = np.bitwise_or.reduce(vs, 0), None
    else:
        w, mag = np.bitwise_xor.reduce(vs, 0), None
    if is_int(dt):
        w = w.astype(np.int64).astype(NP[dt]).astype(np.int64) if dt != tutti.uint64 else w
        return w, None
    if mag is None:
        return w, 0.0
    return w, (m + 2) * eps(dt) * mag + 1e-300


def check(what, dt, got, want, tol=None):
    global cases
    cases += 1
    g = value(dt, got)
    if dt == tutti.bool:
        g = g != 0
        want = np.asarray(want) != 0
        bad = g != want
    elif tol is None:
        bad = g != want
    else:
        bad = ~(np.abs(g - want) <= tol)
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"rank {rank}: {what} ({tutti.DataType(dt).name}): {int(bad.sum())} wrong elements; "
                             f"first at {i}: got {g.flat[i]!r}, want {np.asarray(want).flat[i]!r}")


def same(what, dt, got, want_arr):
    check(what, dt, got, value(dt, want_arr))


def valid(dt, op):
    return tutti.reduce_op_invalid_reason(dt, op) == ""


def ops_for(dt):
    out = [op for op in OPS if valid(dt, op)]
    scalar = 2.0 if is_int(dt) else 0.5
    p = tutti.premul_sum(scalar)
    if valid(dt, p):
        out.append(p)
    return out


def run(c, name, async_, *args, **kw):
    """Calls the blocking form or the i* form (then waits)."""
    if async_:
        w = getattr(c, "i" + name)(*args, **kw)
        assert isinstance(w, tutti.Work)
        w.wait()
        assert w.test() and w.is_completed() and w.exception() is None
        return w
    return getattr(c, name)(*args, **kw)


def collectives(c, tag):
    """Every collective on communicator c (size m, rank me)."""
    m, me = c.size, c.rank
    count = 5
    case = 0
    for dt in DTYPES:
        kw = {"dtype": dt} if dt == tutti.bfloat16 else {}
        for async_ in (False, True):
            mode = f"{tag} {'async' if async_ else 'blocking'}"
            # broadcast, every root
            for root in range(m):
                case += 1
                buf = data(dt, count, me, case) if me == root else np.zeros(count, NP[dt])
                run(c, "broadcast", async_, buf, root=root, **kw)
                same(f"{mode} broadcast root {root}", dt, buf, data(dt, count, root, case))
            # reductions
            for op in ops_for(dt):
                case += 1
                xs = [data(dt, count, r, case, op) for r in range(m)]
                want, tol = reduce_ref(dt, op, xs, m)
                x = xs[me].copy()
                out = np.zeros_like(x)
                run(c, "all_reduce", async_, x, out, op=op, **kw)
                check(f"{mode} all_reduce {op}", dt, out, want, tol)
                same(f"{mode} all_reduce {op} (input untouched)", dt, x, xs[me])
                run(c, "all_reduce", async_, x, op=op, **kw)  # in place
                check(f"{mode} all_reduce in place {op}", dt, x, want, tol)
                root = case % m
                x = xs[me].copy()
                out = np.zeros_like(x)
                run(c, "reduce", async_, x, out if me == root else None, op=op, root=root, **kw)
                if me == root:
                    check(f"{mode} reduce {op} root {root}", dt, out, want, tol)
                # reduce_scatter: contiguous and list forms
                big = [data(dt, count * m, r, case + 1000, op) for r in range(m)]
                w2, t2 = reduce_ref(dt, op, [b[me * count:(me + 1) * count] for b in big], m)
                out = np.zeros(count, NP[dt])
                run(c, "reduce_scatter", async_, big[me], out, op=op, **kw)
                check(f"{mode} reduce_scatter {op}", dt, out, w2, t2)
                out = np.zeros(count, NP[dt])
                parts = [big[me][r * count:(r + 1) * count].copy() for r in range(m)]
                run(c, "reduce_scatter", async_, parts, out, op=op, **kw)
                check(f"{mode} reduce_scatter list {op}", dt, out, w2, t2)
            # gathers and scatters
            case += 1
            mine = data(dt, count, me, case)
            everyone = np.concatenate([data(dt, count, r, case) for r in range(m)])
            out = np.zeros(count * m, NP[dt])
            run(c, "all_gather", async_, mine, out, **kw)
            same(f"{mode} all_gather", dt, out, everyone)
            outs = [np.zeros(count, NP[dt]) for _ in range(m)]
            run(c, "all_gather", async_, mine, outs, **kw)
            same(f"{mode} all_gather list", dt, np.concatenate(outs), everyone)
            for root in range(m):
                out = np.zeros(count * m, NP[dt])
                run(c, "gather", async_, mine, out if me == root else None, root=root, **kw)
                if me == root:
                    same(f"{mode} gather root {root}", dt, out, everyone)
                outs = [np.zeros(count, NP[dt]) for _ in range(m)]
                run(c, "gather", async_, mine, outs if me == root else None, root=root, **kw)
                if me == root:
                    same(f"{mode} gather list root {root}", dt, np.concatenate(outs), everyone)
                src = data(dt, count * m, root, case + 2000)
                out = np.zeros(count, NP[dt])
                run(c, "scatter", async_, src if me == root else None, out, root=root, **kw)
                same(f"{mode} scatter root {root}", dt, out, src[me * count:(me + 1) * count])
                out = np.zeros(count, NP[dt])
                lst = [src[r * count:(r + 1) * count].copy() for r in range(m)]
                run(c, "scatter", async_, lst if me == root else None, out, root=root, **kw)
                same(f"{mode} scatter list root {root}", dt, out, src[me * count:(me + 1) * count])
            # all_to_all: block r of rank s's input goes to rank r
            case += 1
            ins = [data(dt, count * m, r, case) for r in range(m)]
            out = np.zeros(count * m, NP[dt])
            run(c, "all_to_all", async_, ins[me], out, **kw)
            same(f"{mode} all_to_all", dt, out,
                 np.concatenate([ins[s][me * count:(me + 1) * count] for s in range(m)]))
            # all_to_all_v: rank s sends s + r + 1 elements to rank r
            def cnt(s, r):
                return s + r + 1
            sc = [cnt(me, r) for r in range(m)]
            rc = [cnt(s, me) for s in range(m)]
            sd = list(np.cumsum([0] + sc[:-1]))
            rd = list(np.cumsum([0] + rc[:-1]))
            srcs = [data(dt, sum(cnt(s, r) for r in range(m)), s, case + 3000) for s in range(m)]
            out = np.zeros(sum(rc), NP[dt])
            run(c, "all_to_all_v", async_, srcs[me], sc, [int(v) for v in sd], out, rc, [int(v) for v in rd],
                **kw)
            want = []
            for s in range(m):
                off = sum(cnt(s, r) for r in range(me))
                want.append(srcs[s][off:off + cnt(s, me)])
            same(f"{mode} all_to_all_v", dt, out, np.concatenate(want))
    run(c, "barrier", False)
    run(c, "barrier", True)


def point_to_point(c):
    m, me = c.size, c.rank
    nxt, prv = (me + 1) % m, (me - 1) % m
    for dt in DTYPES:
        kw = {"dtype": dt} if dt == tutti.bfloat16 else {}
        x = data(dt, 7, me, 4000)
        y = np.zeros(7, NP[dt])
        ws = c.isend(x, nxt, tag=3, **kw)
        wr = c.irecv(y, prv, tag=3, **kw)
        ws.wait()
        wr.wait()
        assert wr.source == prv and wr.bytes == y.nbytes, (wr.source, wr.bytes)
        same("isend/irecv", dt, y, data(dt, 7, prv, 4000))
    # blocking, any source: everyone sends to rank 0
    if me == 0:
        seen = set()
        for _ in range(m - 1):
            buf = np.zeros(3, np.int64)
            src = c.recv(buf)
            seen.add(src)
            same("recv any source", tutti.int64, buf, np.array([src, src * 10, 7]))
        assert seen == set(range(1, m)), seen
    else:
        c.send(np.array([me, me * 10, 7], np.int64), 0)
    # tags keep messages apart
    if m >= 2 and me in (0, 1):
        other = 1 - me
        a, b = np.full(4, 10 + me, np.int32), np.full(4, 20 + me, np.int32)
        w1 = c.isend(a, other, tag=1)
        w2 = c.isend(b, other, tag=2)
        ra, rb = np.zeros(4, np.int32), np.zeros(4, np.int32)
        c.recv(rb, other, tag=2)
        c.recv(ra, other, tag=1)
        w1.wait()
        w2.wait()
        same("tag 1", tutti.int32, ra, np.full(4, 10 + other, np.int32))
        same("tag 2", tutti.int32, rb, np.full(4, 20 + other, np.int32))


def groups():
    # new_group: the even ranks, and the last two ranks in reverse order
    evens = list(range(0, n, 2))
    g = comm.new_group(evens)
    assert (g is not None) == (rank in evens)
    if g is not None:
        assert g.size == len(evens) and g.rank == evens.index(rank) and g.world_ranks == evens
        collectives_small(g, "new_group(evens)")
    if n >= 2:
        rev = [n - 1, n - 2]
        g2 = comm.new_group(rev)
        if g2 is not None:
            assert g2.rank == rev.index(rank)
            collectives_small(g2, "new_group(reversed)")
    # split: by parity, ordered by descending rank
    s = comm.split(rank % 2, key=-rank)
    members = sorted([r for r in range(n) if r % 2 == rank % 2], reverse=True)
    assert s.size == len(members) and s.rank == members.index(rank), (s.size, s.rank)
    collectives_small(s, "split")
    assert comm.split(-1) is None
    comm.barrier()


def collectives_small(c, tag):
    m, me = c.size, c.rank
    x = np.array([c.global_rank + 1.5, 2.0], np.float64)
    c.all_reduce(x)
    total = sum(w + 1.5 for w in c.world_ranks)
    same(f"{tag} all_reduce", tutti.float64, x, np.array([total, 2.0 * m]))
    out = np.zeros(m, np.int64)
    c.all_gather(np.array([c.global_rank], np.int64), out)
    same(f"{tag} all_gather", tutti.int64, out, np.array(c.world_ranks))
    if m > 1:
        y = np.array([me], np.int32)
        w = c.isend(y, (me + 1) % m)
        z = np.zeros(1, np.int32)
        c.recv(z, (me - 1) % m)
        w.wait()
        same(f"{tag} send/recv", tutti.int32, z, np.array([(me - 1) % m]))


def buffers():
    """Other buffer-protocol objects, dtype overrides, read-only inputs."""
    import array
    b = bytearray([rank + 1] * 4)
    comm.all_reduce(b)  # uint8 SUM in place
    same("bytearray", tutti.uint8, np.frombuffer(b, np.uint8), np.full(4, sum(range(1, n + 1)) % 256))
    a = array.array("d", [rank, 1.0])
    comm.all_reduce(a, op=tutti.MAX)
    same("array.array", tutti.float64, np.array(a), np.array([n - 1, 1.0]))
    ro = np.arange(4, dtype=np.float32) + rank
    ro.setflags(write=False)
    out = np.zeros(4, np.float32)
    comm.all_reduce(ro, out)  # a read-only send buffer is fine
    same("read-only input", tutti.float32, out, (np.arange(4) * n + sum(range(n))).astype(np.float32))
    mv = memoryview(np.full(3, rank, np.int64))
    comm.broadcast(mv, root=n - 1)
    same("memoryview", tutti.int64, np.asarray(mv), np.full(3, n - 1))
    m2 = np.full((2, 3), rank + 1, np.int16)
    comm.all_reduce(m2)  # 2-d arrays are flat buffers
    same("2-d", tutti.int16, m2.ravel(), np.full(6, n * (n + 1) // 2))


def shared():
    """Communicator.alloc_shared: numpy arrays over memory every rank maps;
    all_reduce (one-shot and two-shot sizes), broadcast and all_gather on
    them read the peers' arrays where they lie (the trace says shm_direct);
    an array keeps its memory after the buffer object is dropped."""
    import json
    mem = comm.alloc_shared(40009 * 4 + 8 * rank)  # sizes may differ per rank
    assert len(mem) == 40009 * 4 + 8 * rank and "SharedMemory" in repr(mem), repr(mem)
    x = np.frombuffer(mem, dtype=np.float32, count=40009)
    del mem  # x holds it
    small = np.frombuffer(comm.alloc_shared(997 * 8), dtype=np.float64)

    def last_algo(op):
        ops = [e for e in json.loads(comm.trace_json())["ops"] if e.get("op") == op]
        return ops[-1].get("algo") if ops else None

    for arr, dt in ((x, tutti.float32), (small, tutti.float64)):
        ran = []
        for op in (tutti.SUM, tutti.MAX, tutti.AVG):
            xs = [data(dt, arr.size, q, 900 + arr.size % 7, op) for q in range(n)]
            arr[:] = xs[rank]
            comm.all_reduce(arr, op=op)
            check(f"alloc_shared all_reduce {arr.size}", dt, arr, *reduce_ref(dt, op, xs, n))
            ran.append(last_algo("all_reduce"))
        # In place first; the timed choice then tries copying too.
        if n > 1 and os.environ.get("TUTTI_TRANSPORT") != "tcp":
            assert "shm_direct" in ran, f"rank {rank}: all_reduce on shared memory ran {ran}"
    want = data(tutti.float32, x.size, n - 1, 950)
    x[:] = want if rank == n - 1 else 0
    comm.broadcast(x, root=n - 1)
    same("alloc_shared broadcast", tutti.float32, x, want)
    out = np.frombuffer(comm.alloc_shared(n * small.nbytes), dtype=np.float64)
    small[:] = data(tutti.float64, small.size, rank, 951)
    comm.all_gather(small, out)
    same("alloc_shared all_gather", tutti.float64, out,
         np.concatenate([data(tutti.float64, small.size, q, 951) for q in range(n)]))


def errors():
    """Error kinds and messages."""
    def expect(cls, words, f):
        try:
            f()
        except cls as e:
            assert isinstance(e, tutti.Error) and isinstance(e, RuntimeError), type(e)
            if cls is not tutti.Error:
                assert e.kind == cls.__name__, (e.kind, cls.__name__)
            for w in words:
                assert w in str(e), (w, str(e))
            return
        raise AssertionError(f"rank {rank}: expected {cls.__name__} {words}")

    x = np.arange(8, dtype=np.float32)
    expect(tutti.InvalidArgument, ["not C-contiguous"], lambda: comm.all_reduce(x[::2]))
    expect(tutti.InvalidArgument, ["band on float32", "meaningless"], lambda: comm.all_reduce(x, op=tutti.BAND))
    expect(tutti.InvalidArgument, ["recvbuf holds 3 elements", "needs 8"],
           lambda: comm.all_reduce(x, np.zeros(3, np.float32)))
    expect(tutti.InvalidArgument, ["root 99"], lambda: comm.broadcast(x, root=99))
    expect(tutti.InvalidArgument, ["not a writable buffer"], lambda: comm.all_reduce(b"abcd"))
    expect(tutti.InvalidArgument, ["is not plain numeric data"],
           lambda: comm.all_reduce(np.zeros(2, np.dtype("U3"))))
    expect(tutti.InvalidArgument, ["is not in this communicator"], lambda: comm.new_group([0, n + 5]))
    expect(tutti.InvalidArgument, ["tag -1"], lambda: comm.send(x, 0, tag=-1))
    # Timeout: a receive from a rank that never sends, on its own communicator.
    g = comm.split(0, rank)
    g.timeout = 0.3
    assert abs(g.timeout - 0.3) < 1e-9
    if rank == 0 and n > 1:
        t0 = time.monotonic()
        expect(tutti.Timeout, ["recv", "from rank 1"], lambda: g.recv(np.zeros(1, np.int8), 1, tag=9))
        assert time.monotonic() - t0 < 5
        # the communicator failed: later calls fail at once, naming the cause
        expect(tutti.Error, [], lambda: g.barrier())
    comm.barrier()
    # abort from another thread wakes a blocked call
    h = comm.split(0, rank)
    if rank == 0 and n > 1:
        threading.Timer(0.2, lambda: h.abort("stop it")).start()
        expect(tutti.Aborted, ["stop it"], lambda: h.recv(np.zeros(1, np.int8), 1, tag=5))
    comm.barrier()
    # a failed Work reports its error through exception() and wait()
    k = comm.split(0, rank)
    k.timeout = 0.3
    if rank == 0 and n > 1:
        w = k.irecv(np.zeros(1, np.int8), 1, tag=11)
        try:
            w.wait()
            raise AssertionError("expected Timeout")
        except tutti.Timeout:
            pass
        assert w.test() and isinstance(w.exception(), tutti.Timeout), w.exception()
    comm.barrier()


def gil():
    """A blocking call releases the GIL: another Python thread runs meanwhile."""
    if n < 2:
        return
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    buf = np.zeros(1, np.int32)
    if rank == 0:
        time.sleep(0.3)  # rank 1 waits in recv meanwhile
        comm.send(np.array([5], np.int32), 1)
    elif rank == 1:
        before = ticks[0]
        comm.recv(buf, 0)
        assert ticks[0] - before >= 20, f"the other thread ran only {ticks[0] - before} times during recv"
        assert buf[0] == 5
    stop.set()
    t.join()
    comm.barrier()


def stores():
    s = tutti.memory_store()
    s.set("a", b"1")
    assert s.get("a") == b"1"
    assert s.add("n", 3) == 3 and s.add("n", 2) == 5
    assert s.compare_set("a", b"1", b"2") == b"2"
    assert s.check(["a", "n"]) and not s.check(["zz"])
    assert s.delete_key("a") and not s.check(["a"])
    s.timeout = 0.2
    try:
        s.get("missing")
        raise AssertionError("expected Timeout")
    except tutti.Timeout as e:
        assert "missing" in str(e), str(e)


collectives(comm, "world")
point_to_point(comm)
groups()
buffers()
shared()
gil()
stores()
errors()
# async Works dropped before they complete keep their buffers alive
if n > 1:
    comm.irecv(np.zeros(1000, np.float32), (rank - 1) % n, tag=77)  # dropped at once
    comm.send(np.ones(1000, np.float32), (rank + 1) % n, tag=77)
comm.barrier()
print(f"ok {cases}")
sys.stdout.flush()
