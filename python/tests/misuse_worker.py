"""Careless use of the tutti module, one case per run (test_misuse.py):

  leave HOW    the last rank leaves before the first collective (HOW: exit,
               sys.exit(0); raise, an uncaught exception); the others must
               get PeerLost naming it within a second
  wait_inf     Work.wait with an infinite or huge timeout waits for the
               operation
"""
import sys
import time

import numpy as np

import tutti

case = sys.argv[1]
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
else:
    raise SystemExit(f"unknown case {case}")
