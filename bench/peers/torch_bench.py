#!/usr/bin/env python3
"""torch_bench: tutti-bench's loop against torch.distributed, backend "gloo"
or "tutti" (torch 2.13 of the project's .venv, CPU tensors).

  .venv/bin/python bench/peers/torch_bench.py --np N COLL [--backend gloo|tutti] [-b MIN] [-e MAX] [-f F]
        [-n ITERS] [-w WARMUP] [-c 0|1] [-d float32] [-o sum|product|min|max] [-r ROOT] [--json FILE]
      starts N ranks itself (subprocesses with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1
      and a free MASTER_PORT; init_method env://);
  build/bin/tuttirun -n N .venv/bin/python bench/peers/torch_bench.py COLL ...
      (any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Run it with the project's venv (scripts/python_env.sh). Backend "tutti" imports tutti.torch from build/python (the build's
Python package) unless tutti is importable already. GLOO_SOCKET_IFNAME defaults to "lo" so that gloo stays on loopback;
torch uses one intra-op thread per rank (torch.set_num_threads(1)) as the
ranks share the machine's cores.

Rules (tools/tutti-bench, see peer_common.h): sizes MIN, MIN*F, ... <= MAX,
blocked collectives rounded to n equal float32 blocks; WARMUP iterations, a
barrier, ITERS timed iterations; time = elapsed / ITERS, max over ranks;
algbw = bytes / time; busbw factors of nccl-tests; with -c 1 one more
iteration on fresh inputs, every output element checked (copies exactly,
sums and products within (n + 1) * eps * sum|x| + n * denorm_min).

Collectives: all_reduce, broadcast and reduce are in place in
torch.distributed (no out-of-place form): the timed iterations run on one
buffer, which starts as the input (for the check it is refilled first).
all_gather is dist.all_gather_into_tensor where the backend has it; one
without _allgather_base gets a list of views of one output tensor
(dist.all_gather; the JSON rows name the call),
gather and scatter likewise with lists of views, all_to_all is
dist.all_to_all_single, sendrecv dist.isend to rank+1 and dist.irecv from
rank-1. A collective the backend rejects is reported as not available:
exit status 3, no rows.
Exit status: 0 all rows correct, 1 wrong elements or an error, 2 bad
options, 3 collective not available.
"""
import argparse
import datetime
import os
import signal
import socket
import subprocess
import sys
import time

EXIT_WRONG, EXIT_USAGE, EXIT_NOT_AVAILABLE = 1, 2, 3

COLLS = {  # name: (reduces, rooted, blocked)
    "all_reduce": (True, False, False),
    "broadcast": (False, True, False),
    "reduce": (True, True, False),
    "all_gather": (False, False, True),
    "gather": (False, True, True),
    "scatter": (False, True, True),
    "reduce_scatter": (True, False, True),
    "all_to_all": (False, False, True),
    "barrier": (False, False, False),
    "sendrecv": (False, False, False),
}
OPS = ("sum", "product", "min", "max")


def parse_size(text):
    units = {"k": 10, "m": 20, "g": 30}
    t = text.strip()
    shift = 0
    if t and t[-1].lower() in units:
        shift = units[t[-1].lower()]
        t = t[:-1]
    if not t.isdigit():
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size (a number of bytes with an optional K, M or G suffix)")
    v = int(t) << shift
    if v > 1 << 50:
        raise argparse.ArgumentTypeError(f"'{text}' is too large")
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("coll", metavar="COLL", choices=list(COLLS))
    p.add_argument("--backend", choices=("gloo", "tutti"), default="gloo")
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, choices=(0, 1), default=1)
    p.add_argument("-d", "--datatype", choices=("float32",), default="float32")
    p.add_argument("-o", "--op", choices=OPS, default="sum")
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--np", type=int, help="start this many ranks here (else: run as one rank of a launcher)")
    a = p.parse_args(argv)
    if a.stepfactor < 2:
        p.error("-f must be at least 2")
    if a.iters < 1 or a.warmup_iters < 0:
        p.error("-n must be >= 1 and -w >= 0")
    if a.minbytes > a.maxbytes:
        p.error(f"-b ({a.minbytes}) is larger than -e ({a.maxbytes})")
    if a.minbytes == 0 and a.coll != "barrier":
        p.error("-b must be at least 1 byte")
    return a


# ---- launcher ---------------------------------------------------------------------


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(np_, argv):
    """Starts np_ ranks of this script (argv without --np); returns the exit status."""
    args, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--np":
            skip = True
            continue
        if a.startswith("--np="):
            continue
        args.append(a)
    port = str(free_port())
    procs = []
    for r in range(np_):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(np_), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args, env=env,
                                      stdin=None if r == 0 else subprocess.DEVNULL))
    result = 0
    kill_at = None  # once a rank failed: when the others are killed
    try:
        pending = list(procs)
        while pending:
            for p in list(pending):
                rc = p.poll()
                if rc is None:
                    continue
                pending.remove(p)
                if rc != 0 and result == 0:
                    result = rc if rc > 0 else 128 - rc
                    kill_at = time.monotonic() + 2.0  # a moment for the others to report
            if kill_at is not None and time.monotonic() >= kill_at:
                for q in pending:  # they would wait for the failed rank until gloo's timeout
                    q.kill()
                kill_at = float("inf")
            time.sleep(0.01)
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        result = 130
    for p in procs:
        p.wait()
    return result


# ---- one rank -------------------------------------------------------------------


def bind_like_tuttirun(local, n):
    """PEERS_BIND_CORES=1 (compare.py sets it): bind this rank as tuttirun binds
    its ranks (tools/tuttirun/placement.h), so every system runs with the same
    placement: an even contiguous share of the allowed CPUs, or CPU local % m of
    m < n allowed."""
    if os.environ.get("PEERS_BIND_CORES") != "1" or n < 1:
        return
    cpus = sorted(os.sched_getaffinity(0))
    m = len(cpus)
    if m == 0:
        return
    if m < n:
        mine = {cpus[local % m]}
    else:
        base, extra = divmod(m, n)
        lo = local * base + min(local, extra)
        mine = set(cpus[lo:lo + base + (1 if local < extra else 0)])
    os.sched_setaffinity(0, mine)


def main(argv):
    a = parse_args(argv)
    if a.np is not None and "TORCH_BENCH_CHILD" not in os.environ:
        if a.np < 1:
            print("torch_bench: error: --np must be at least 1", file=sys.stderr)
            return EXIT_USAGE
        os.environ["TORCH_BENCH_CHILD"] = "1"
        return launch(a.np, argv)

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import numpy as np
    import torch
    import torch.distributed as dist

    if a.backend == "tutti":
        try:
            import tutti.torch  # noqa: F401  registers the backend
        except ImportError:
            here = os.path.dirname(os.path.abspath(__file__))
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(here)), "build", "python"))
            import tutti.torch  # noqa: F401

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    n = int(os.environ.get("WORLD_SIZE", "1"))
    bind_like_tuttirun(int(os.environ.get("LOCAL_RANK", rank)), n)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        if n != 1:
            print("torch_bench: error: MASTER_PORT is not set (use --np N or a launcher)", file=sys.stderr)
            return EXIT_USAGE
        os.environ["MASTER_PORT"] = str(free_port())
    reduces, rooted, blocked = COLLS[a.coll]
    if rooted and not 0 <= a.root < n:
        if rank == 0:
            print(f"torch_bench: error: -r: root {a.root} is not a rank of a world of {n}", file=sys.stderr)
        return EXIT_USAGE
    if a.coll == "sendrecv" and n < 2:
        if rank == 0:
            print("torch_bench: error: sendrecv needs at least 2 ranks", file=sys.stderr)
        return EXIT_USAGE

    dist.init_process_group(a.backend, init_method="env://", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    red = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX}[a.op]
    for_product = reduces and a.op == "product"

    # Inputs: float32 in [-4, 4] (never 0; [0.5, 1.5] for product), a function of
    # (rank, iteration, bytes, index) so that any rank regenerates any input.
    def generate(r, it, nbytes, m):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0x7065657273, r, it, nbytes])))
        u = rng.random(m)
        v = (0.5 + u if for_product else (2 * u - 1) * 4.0).astype(np.float32)
        v[v == 0] = np.float32(0.5)
        return v

    def poison(t):
        b = t.numpy().view(np.uint8)
        b[0::2] = 0x00
        b[1::2] = 0xA5

    # The row's shape (tutti-bench's make_shape).
    def shape(requested):
        if a.coll == "barrier":
            return 0, 0, 0
        if blocked:
            block = requested // (4 * n)
            count = block * n
        else:
            count = requested // 4
            block = count
        return count * 4, count, block

    def sweep():
        if a.coll == "barrier":
            return [0]
        sizes, s = [], a.minbytes
        while True:
            sizes.append(s)
            if s > a.maxbytes // a.stepfactor:
                break
            s *= a.stepfactor
        return sizes

    def bus_factor():
        if a.coll == "all_reduce":
            return 2.0 * (n - 1) / n
        if a.coll in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
            return (n - 1) / n
        return 1.0

    json_file = None
    failed = torch.zeros(1, dtype=torch.int32)
    if rank == 0 and a.json:
        try:
            json_file = open(a.json, "w")
        except OSError as e:
            print(f"torch_bench: error: cannot open --json file '{a.json}' for writing: {e}", file=sys.stderr)
            failed[0] = 1
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if failed.item():
        return EXIT_USAGE

    nxt, prv = (rank + 1) % n, (rank - 1 + n) % n
    # all_gather: all_gather_into_tensor unless the backend lacks it.
    gather_into_tensor = [a.backend != "gloo"]
    # all_reduce and reduce have no out-of-place form in torch.distributed
    # (broadcast is one buffer in tutti-bench too, reported as not in place).
    INPLACE = a.coll in ("all_reduce", "reduce")

    class Case:
        def __init__(self, bytes_, count, block):
            self.bytes, self.count, self.block = bytes_, count, block
            c = a.coll
            self.inplace = c in ("all_reduce", "broadcast", "reduce")
            self.writes_input = not (c in ("broadcast", "scatter") and rank != a.root)
            if c in ("all_reduce", "reduce", "broadcast"):
                self.send = torch.empty(count, dtype=torch.float32)
                self.recv = torch.empty(count, dtype=torch.float32)
            elif c in ("all_gather", "gather"):
                self.send = torch.empty(block, dtype=torch.float32)
                self.recv = torch.empty(count, dtype=torch.float32)
            elif c in ("scatter", "reduce_scatter"):
                self.send = torch.empty(count, dtype=torch.float32)
                self.recv = torch.empty(block, dtype=torch.float32)
            elif c in ("all_to_all", "sendrecv"):
                self.send = torch.empty(count, dtype=torch.float32)
                self.recv = torch.empty(count, dtype=torch.float32)
            else:
                self.send = self.recv = torch.empty(0, dtype=torch.float32)
            self.recv_list = list(self.recv.split(block)) if block > 0 and c in (
                "all_gather", "gather") else None
            self.send_list = list(self.send.split(block)) if block > 0 and c in (
                "scatter", "reduce_scatter") else None

        def fill(self, it):
            if self.recv.numel() > 0:
                poison(self.recv)
            if self.writes_input and self.send.numel() > 0:
                self.send.numpy()[:] = generate(rank, it, self.bytes, self.send.numel())
            if self.inplace:  # the op's buffer starts as the input
                if self.writes_input:
                    self.recv.copy_(self.send)

        def run(self):
            c = a.coll
            if c == "all_reduce":
                dist.all_reduce(self.recv, op=red)
            elif c == "broadcast":
                dist.broadcast(self.recv, src=a.root)
            elif c == "reduce":
                dist.reduce(self.recv, dst=a.root, op=red)
            elif c == "all_gather":
                if gather_into_tensor[0]:
                    dist.all_gather_into_tensor(self.recv, self.send)
                else:
                    dist.all_gather(self.recv_list, self.send)
            elif c == "gather":
                dist.gather(self.send, gather_list=self.recv_list if rank == a.root else None, dst=a.root)
            elif c == "scatter":
                dist.scatter(self.recv, scatter_list=self.send_list if rank == a.root else None, src=a.root)
            elif c == "reduce_scatter":
                dist.reduce_scatter(self.recv, self.send_list, op=red)
            elif c == "all_to_all":
                dist.all_to_all_single(self.recv, self.send)
            elif c == "barrier":
                dist.barrier()
            elif c == "sendrecv":
                ws = dist.isend(self.send, nxt)
                wr = dist.irecv(self.recv, prv)
                ws.wait()
                wr.wait()

        def check(self, it):
            """Number of wrong output elements on this rank, and a description of the first."""
            c, count, block = a.coll, self.count, self.block
            got = self.recv.numpy()
            segs = []  # (out_off, src, src_off, len); src -1: the reduction
            if c == "all_reduce" or (c == "reduce" and rank == a.root):
                segs.append((0, -1, 0, count))
            elif c == "reduce_scatter":
                segs.append((0, -1, rank * block, block))
            elif c == "broadcast":
                segs.append((0, a.root, 0, count))
            elif c == "all_gather" or (c == "gather" and rank == a.root):
                segs += [(b * block, b, 0, block) for b in range(n)]
            elif c == "scatter":
                segs.append((0, a.root, rank * block, block))
            elif c == "all_to_all":
                segs += [(b * block, b, rank * block, block) for b in range(n)]
            elif c == "sendrecv":
                segs.append((0, prv, 0, count))
            inputs = {}

            def inp(r):
                if r not in inputs:
                    inputs[r] = generate(r, it, self.bytes, (count if c != "all_gather" and c != "gather"
                                                             else block))
                return inputs[r]

            wrong, first = 0, ""
            for out_off, src, src_off, ln in segs:
                g = got[out_off:out_off + ln]
                if src >= 0:
                    want = inp(src)[src_off:src_off + ln]
                    bad = g.view(np.uint32) != want.view(np.uint32)
                    tol = None
                else:
                    xs = np.stack([inp(r)[src_off:src_off + ln].astype(np.float64) for r in range(n)])
                    if a.op == "sum":
                        acc, mag = xs.sum(axis=0), np.abs(xs).sum(axis=0)
                    elif a.op == "product":
                        acc, mag = xs.prod(axis=0), np.abs(xs).prod(axis=0)
                    elif a.op == "min":
                        acc, mag = xs.min(axis=0), np.zeros(ln)
                    else:
                        acc, mag = xs.max(axis=0), np.zeros(ln)
                    want = acc.astype(np.float32)
                    tol = (n + 1) * 2.0 ** -23 * mag + n * 2.0 ** -149
                    diff = np.abs(g.astype(np.float64) - want.astype(np.float64))
                    bad = ~(diff <= tol)  # NaN counts as wrong
                k = int(bad.sum())
                if k and not first:
                    i = int(np.argmax(bad))
                    first = (f"output element {out_off + i}: got {float(g[i]):.9g}, expected {float(want[i]):.9g}"
                             + (f" (from rank {src})" if src >= 0 else f" (tolerance {float(tol[i]):.3g})"))
                wrong += k
            return wrong, first

    def row_line(size, count, typ, redop, root, tm, algbw, busbw, wrong):
        return ("%12s  %12s  %10s  %10s  %6s  %10s  %8s  %8s  %8s" % (
            size, count, typ, redop, root, tm, algbw, busbw, wrong)).rstrip()

    def human(b):
        units, u = ["B", "KiB", "MiB", "GiB"], 0
        while u < 3 and b >= 1024 and b % 1024 == 0:
            b //= 1024
            u += 1
        return f"{b} {units[u]}"

    if rank == 0:
        hdr = f"# torch_bench (torch {torch.__version__}, {a.backend} backend): {a.coll}, world size {n}, dtype float32"
        if reduces:
            hdr += f", op {a.op}"
        if rooted:
            hdr += f", root {a.root}"
        print(hdr + (", in-place" if INPLACE else ", out-of-place"))
        if a.coll == "barrier":
            print(f"# iters {a.iters}, warmup {a.warmup_iters}")
        else:
            print(f"# sizes {human(a.minbytes)} .. {human(a.maxbytes)} (factor {a.stepfactor}), iters {a.iters}, "
                  f"warmup {a.warmup_iters}, check {'on' if a.check else 'off'}")
        print("#")
        print(row_line("#       size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"))
        print(row_line("#        (B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
        sys.stdout.flush()

    total_wrong, busbw_sum, rows = 0, 0.0, 0
    first_row = True
    for requested in sweep():
        nbytes, count, block = shape(requested)
        if a.coll != "barrier" and count == 0:
            continue
        case = Case(nbytes, count, block)
        case.fill(0)
        if first_row:
            # Whether the backend has this collective at all: one untimed try.
            first_row = False
            try:
                case.run()
            except RuntimeError as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                if not any(k in msg.lower() for k in ("not support", "no support", "not implemented")):
                    raise
                if rank == 0:
                    print(f"# {a.coll} is not available in torch {torch.__version__} with backend {a.backend}: {msg}")
                    sys.stdout.flush()
                if json_file:
                    json_file.close()
                # The others may be blocked in the call: leave without a goodbye.
                sys.stdout.flush()
                os._exit(EXIT_NOT_AVAILABLE)
            case.fill(0)
        for _ in range(a.warmup_iters):
            case.run()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            case.run()
        t1 = time.perf_counter()
        t = torch.tensor([(t1 - t0) * 1e6 / a.iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        time_us = t.item()

        wrong = 0
        if a.check:
            it = 1 + a.warmup_iters + a.iters
            case.fill(it)
            case.run()
            w, first = case.check(it)
            if w:
                print(f"torch_bench: rank {rank}: {a.coll} of {nbytes} bytes: {w} wrong elements; first: {first}",
                      file=sys.stderr)
                sys.stderr.flush()
            wt = torch.tensor([w], dtype=torch.int64)
            dist.all_reduce(wt, op=dist.ReduceOp.SUM)
            wrong = wt.item()
        total_wrong += wrong
        algbw = nbytes / (time_us * 1e3) if time_us > 0 else 0.0
        busbw = algbw * bus_factor()
        busbw_sum += busbw
        rows += 1
        if rank == 0:
            print(row_line(str(nbytes), str(count), "float32", a.op if reduces else "none",
                           str(a.root if rooted else -1), f"{time_us:.2f}", f"{algbw:.2f}", f"{busbw:.2f}",
                           str(wrong) if a.check else "N/A"))
            sys.stdout.flush()
            if json_file:
                import json
                json_file.write(json.dumps({
                    "collective": a.coll, "bytes": nbytes, "count": count, "dtype": "float32",
                    "op": a.op if reduces else "none", "root": a.root if rooted else -1, "world_size": n,
                    "time_us": time_us, "algbw": algbw, "busbw": busbw,
                    "wrong": wrong if a.check else None, "inplace": INPLACE, "backend": a.backend,
                    "call": ("all_gather_into_tensor" if gather_into_tensor[0] else "all_gather")
                    if a.coll == "all_gather" else a.coll}) + "\n")
                json_file.flush()
    if rank == 0:
        if a.check:
            print(f"# Wrong elements total: {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth    : {busbw_sum / rows if rows else 0.0:.4f} GB/s")
        sys.stdout.flush()
        if json_file:
            json_file.close()
    dist.barrier()
    dist.destroy_process_group()
    return EXIT_WRONG if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
