"""Careless use of the tutti module, one case per run (test_misuse.py):

  leave HOW    the last rank leaves before the first collective (HOW: exit,
               sys.exit(0); raise, an uncaught exception; torch_exit,
               sys.exit(0) under torch); the others must get PeerLost
               naming it within a second
  wait_inf     Work.wait with an infinite or huge timeout waits for the
               operation
  sigint HOW   Ctrl-C (SIGINT) reaches rank 0 while it waits for rank 1 (HOW:
               recv, wait, all_reduce, or torch_small, torch_large,
               torch_recv, torch_wait through the torch backend): it must
               raise KeyboardInterrupt within a second and leave the
               communicator aborted, naming the interrupt
  strangers    a stranger's process opens 1,100 idle connections to the
               store's port and 1,100 to rank 0's, again as they are closed
               (at most 20,000, for 6 s), while the job, whose ranks may
               open 1,024 descriptors, runs collectives and makes groups
               (each a shared-memory segment): no operation may take a
               second, and the idle connections must be closed
  attacker HOST PORT PORT   (the stranger of `strangers`)
  listen ADDR  prints the addresses this rank listens on (TCP); they must
               all be ADDR
  fork         rank 0 forks: the child cannot act as the rank (nor wait for
               the parent's work) and its exit disturbs nobody; the parent
               and rank 1 go on with correct sums
"""
import os
import signal
import sys
import threading
import time

import numpy as np

import tutti

case = sys.argv[1]
if case == "attacker":
    # Bounded: at most 20,000 connections, for at most 6 s; loopback only.
    import resource
    import selectors
    import socket
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    host, ports = sys.argv[2], [int(p) for p in sys.argv[3:]]
    assert host in ("127.0.0.1", "localhost"), host
    sel = selectors.DefaultSelector()
    made = closed_by_them = 0
    held = {p: 0 for p in ports}
    end = time.monotonic() + 6
    while time.monotonic() < end and made < 20000:
        for p in ports:
            while held[p] < 1100 and made < 20000:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex((host, p))
                sel.register(s, selectors.EVENT_READ, p)
                held[p] += 1
                made += 1
        for key, _ in sel.select(timeout=0.05):
            try:
                gone = key.fileobj.recv(4096, socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                held[key.data] -= 1
                closed_by_them += 1
    print(f"made {made} closed_by_them {closed_by_them} held {sum(held.values())}", flush=True)
    sys.exit(0)
if len(sys.argv) > 2 and sys.argv[2].startswith("torch"):
    import datetime

    import torch
    import torch.distributed as dist

    import tutti.torch  # noqa: F401
    dist.init_process_group("tutti", timeout=datetime.timedelta(seconds=20))
    comm = None
    rank, n = dist.get_rank(), dist.get_world_size()
else:
    if case == "strangers":
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    comm = tutti.init(timeout=20)
    rank, n = comm.rank, comm.size

if case == "leave":
    if rank == n - 1:
        if sys.argv[2] in ("exit", "torch_exit"):
            sys.exit(0)
        raise RuntimeError("a careless rank raises")
    x = np.random.default_rng(rank).random(1000).astype(np.float32)
    t0 = time.monotonic()
    try:
        if comm is None:  # torch's default timeout is 30 minutes; tutti's here 20 s
            dist.all_reduce(torch.from_numpy(x))
        else:
            comm.all_reduce(x)
        raise AssertionError("all_reduce completed without the last rank")
    except (tutti.PeerLost, RuntimeError) as e:
        took = time.monotonic() - t0
        assert "PeerLost" in str(e) and f"rank {n - 1}" in str(e), str(e)
        # Counted from the start of the call: under torch this includes the
        # leaving interpreter's own exit (torch's teardown), over 1 s on a
        # loaded machine.
        limit = 2.0 if comm is None else 1.0
        assert took < limit, f"named after {took:.2f} s: {e}"
    print("ok", flush=True)
    if comm is None:
        os._exit(0)  # rank 2 is gone: no orderly teardown to wait for
elif case == "wait_inf":
    for timeout in (float("inf"), 1e30, 2.0 ** 63):
        if rank == 0:
            time.sleep(0.3)
            comm.send(np.arange(5, dtype=np.int64) + 7, 1, tag=3)
        elif rank == 1:
            got = np.zeros(5, np.int64)
            w = comm.irecv(got, 0, tag=3)
            t0 = time.monotonic()
            assert w.wait(timeout=timeout) is True, timeout
            assert time.monotonic() - t0 > 0.2, f"wait({timeout}) returned before the message came"
            assert np.array_equal(got, np.arange(5) + 7), got
        comm.barrier()
    w = comm.ibarrier()
    try:
        w.wait(timeout=float("nan"))
        raise AssertionError("wait(timeout=nan) accepted")
    except tutti.InvalidArgument as e:
        assert "NaN" in e.message, e.message
    w.wait()
    print("ok", flush=True)
elif case == "sigint":
    how = sys.argv[2]
    # Python's own handler, whatever the launcher left (a background job
    # of a shell ignores SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if rank == 1:
        time.sleep(2)  # takes no part; leaves in order afterwards
        print("ok", flush=True)
        sys.exit(0)

    def ctrl_c():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    t0 = time.monotonic()
    try:
        if how == "recv":
            comm.recv(np.zeros(4), 1)
        elif how == "wait":
            comm.irecv(np.zeros(4), 1).wait()
        elif how == "all_reduce":
            comm.all_reduce(np.random.default_rng(0).random(1 << 16))
        elif how == "torch_small":
            dist.all_reduce(torch.rand(4))
        elif how == "torch_large":
            dist.all_reduce(torch.rand(1 << 20))
        elif how == "torch_recv":
            dist.recv(torch.zeros(4), 1)
        elif how == "torch_wait":
            dist.all_reduce(torch.rand(1 << 20), async_op=True).wait()
        raise AssertionError("the call returned")
    except KeyboardInterrupt:
        took = time.monotonic() - t0
        assert took < 1.3, f"KeyboardInterrupt after {took:.2f} s"
    try:
        if comm is not None:
            comm.barrier()
        else:
            dist.barrier()
        raise AssertionError("the interrupted communicator went on")
    except Exception as e:  # tutti.Aborted; torch's DistBackendError
        assert "interrupted by SIGINT (Ctrl-C)" in str(e), str(e)
    print("ok", flush=True)
    os._exit(0)  # rank 1 is gone: no orderly teardown to wait for
elif case == "strangers":
    import resource
    import subprocess
    store = tutti.tcp_store_client(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), timeout=10)
    # Rank 0's record: its host record, a newline, then TCP's address "host port".
    port0 = int(store.get("tutti/rank/0").split(b"\n", 1)[1].split()[1])
    attacker = None
    if rank == n - 1:
        attacker = subprocess.Popen([sys.executable, __file__, "attacker", os.environ["MASTER_ADDR"],
                                     os.environ["MASTER_PORT"], str(port0)], stdout=subprocess.PIPE, text=True)
    comm.barrier()
    worst, rounds = 0.0, 0
    end = time.monotonic() + 7
    rng = np.random.default_rng(rank)
    go = np.ones(1, np.int32)
    while True:
        go[0] = time.monotonic() < end
        comm.broadcast(go, 0)  # rank 0's clock says when to stop
        if not go[0]:
            break
        t0 = time.monotonic()
        g = comm.new_group(list(range(n)))  # a new communicator: a shared-memory segment
        x = rng.random(4096)
        want = np.zeros_like(x)
        comm.all_reduce(x, want)
        g.all_reduce(x)
        assert np.array_equal(x, want)
        g.barrier()
        del g
        worst = max(worst, time.monotonic() - t0)
        rounds += 1
    comm.barrier()
    if attacker:
        out, _ = attacker.communicate(timeout=30)
        made, closed = int(out.split()[1]), int(out.split()[3])
        # The idle connections were closed, many times over.
        assert made > 2200 and closed > 1000, out
        print(out.strip(), flush=True)
    assert worst < 1.0, f"an operation took {worst:.2f} s"
    print(f"ok {rounds} rounds, worst {worst:.3f} s", flush=True)
elif case == "listen":
    comm.barrier()
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN, one of ours
            a, port = f[1].split(":")
            found.append(".".join(str(int(a[i:i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}")
    assert len(found) == (2 if rank == 0 else 1), found  # rank 0: the store too
    assert all(x.startswith(sys.argv[2] + ":") for x in found), found
    print("ok", found, flush=True)
elif case == "fork":
    x = np.random.default_rng(11 + rank).random(4096)
    want = sum(np.random.default_rng(11 + r).random(4096) for r in range(n))
    got = x.copy()
    comm.all_reduce(got)
    assert np.allclose(got, want)
    if rank == 0:
        pending = comm.irecv(np.zeros(3), 1, tag=9)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                comm.all_reduce(x.copy())
                code = 3
            except tutti.InvalidArgument as e:
                if f"is a child forked from it and cannot use it" not in e.message:
                    code = 4
            try:
                pending.wait()
                code = code or 5
            except tutti.InvalidArgument as e:
                if "a forked child cannot wait for it" not in e.message:
                    code = code or 6
            sys.exit(code)  # an orderly exit: destructors run in the child
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"child: {status}"
        comm.barrier()
        pending.wait()
    else:
        comm.barrier()
        comm.send(np.ones(3), 0, tag=9)
    for i in range(20):
        got = x.copy()
        comm.all_reduce(got)
        assert np.allclose(got, want), i
    print("ok", flush=True)
else:
    raise SystemExit(f"unknown case {case}")
