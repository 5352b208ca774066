"""Careless use of the tutti module, one case per run (test_misuse.py):

  leave HOW    the last rank leaves before the first collective (HOW: exit,
               sys.exit(0); raise, an uncaught exception); the others must
               get PeerLost naming it within a second
  wait_inf     Work.wait with an infinite or huge timeout waits for the
               operation
  sigint HOW   Ctrl-C (SIGINT) reaches rank 0 while it waits for rank 1 (HOW:
               recv, wait, all_reduce, or torch_small, torch_large,
               torch_recv, torch_wait through the torch backend): it must
               raise KeyboardInterrupt within a second and leave the
               communicator aborted, naming the interrupt
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
if case == "sigint" and sys.argv[2].startswith("torch"):
    import datetime

    import torch
    import torch.distributed as dist

    import tutti.torch  # noqa: F401
    dist.init_process_group("tutti", timeout=datetime.timedelta(seconds=20))
    comm = None
    rank, n = dist.get_rank(), dist.get_world_size()
else:
    comm = tutti.init(timeout=20)
    rank, n = comm.rank, comm.size

if case == "leave":
    if rank == n - 1:
        if sys.argv[2] == "exit":
            sys.exit(0)
        raise RuntimeError("a careless rank raises")
    x = np.random.default_rng(rank).random(1000).astype(np.float32)
    t0 = time.monotonic()
    try:
        comm.all_reduce(x)
        raise AssertionError("all_reduce completed without the last rank")
    except tutti.PeerLost as e:
        took = time.monotonic() - t0
        assert f"rank {n - 1}" in e.message, e.message
        assert took < 1.0, f"named after {took:.2f} s: {e.message}"
    print("ok", flush=True)
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
