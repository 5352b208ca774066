"""One rank of the survival test of the tutti module (test_module.py).

Rank 3 of 4 is killed (SIGKILL) between all_reduces; the others get
tutti.PeerLost naming it, revoke, agree on the loss, shrink to the three of
them and carry on: an all_reduce of random data on the new communicator,
every element checked. Before that, revoke() makes every member's calls fail
with tutti.Revoked. Prints "ok" at the end.
"""
import os
import signal
import time

import numpy as np

import tutti

rank = int(os.environ["RANK"])
comm = tutti.init(timeout=30)
assert comm.size == 4


def data(seed, r, n=1000):
    return np.random.default_rng(seed * 100 + r).integers(1, 1000, n).astype(np.float64)


def checked_all_reduce(c, seed):
    x = data(seed, c.world_ranks[c.rank])
    c.all_reduce(x)
    want = sum(data(seed, w) for w in c.world_ranks)
    assert np.array_equal(x, want), (x[:4], want[:4])


# revoke: a sub-group of all four, revoked by rank 1 while the others wait in it.
g = comm.new_group([0, 1, 2, 3])
if rank == 1:
    time.sleep(0.2)
    g.revoke()
else:
    try:
        g.barrier()
        raise SystemExit("a barrier on a revoked communicator returned")
    except tutti.Revoked as e:
        assert "rank 1 revoked the communicator" in str(e), e
try:
    g.barrier()
    raise SystemExit("a later barrier returned")
except tutti.Revoked:
    pass
assert g.agree(rank != 2) is False
assert g.agree(True, return_failed=True) == (True, [])

for i in range(3):
    checked_all_reduce(comm, i)
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.monotonic()
try:
    for i in range(100000):
        checked_all_reduce(comm, 10 + i)
    raise SystemExit("all_reduce went on without rank 3")
except tutti.PeerLost as e:
    assert "rank 3" in str(e), e
except tutti.Revoked as e:  # another survivor revoked first
    assert "revoked the communicator" in str(e), e
comm.revoke()
flag, failed = comm.agree(True, return_failed=True)
assert (flag, failed) == (True, [3]), (flag, failed)
assert comm.failed_ranks() == [3]
s = comm.shrink()
assert time.monotonic() - t0 < 2.0, time.monotonic() - t0
assert (s.size, s.rank) == (3, rank), (s.size, s.rank)
for i in range(5):
    checked_all_reduce(s, 50 + i)
print("ok")
