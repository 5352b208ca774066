"""One rank of the process-group lifecycle test (test_torch_survive.py).

One round per port given (the test gives 20), each a new default group on
its own port (tcp:// init), ended by destroy_process_group in even rounds
and by torch's abort of every group (_abort_process_group) in odd ones. In
every round a pending all_reduce that rank 1 never joins (a large
asynchronous one, or a small one that runs in the calling thread) is ended
by tutti.torch.abort from another thread: its Work fails with tutti.Aborted
naming the reason, and tutti.torch.error() reports it; then a new group
derived from the world's communicator works, the aborted one included.
After every round, while this rank still holds the round's backends and
Work, no socket and no shared-memory segment is left, and the later rounds
end with no more threads or open files than the first two: nothing leaks.
"""
import datetime
import gc
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import tutti
import tutti.torch

torch.set_num_threads(1)
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
ports = sys.argv[1:]


def resources():
    shm = sorted(f for f in os.listdir("/dev/shm") if f.startswith(os.environ["TUTTI_SHM_PREFIX"]))
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return len(os.listdir("/proc/self/task")), sockets, len(fds), shm


seen = []
for i, port in enumerate(ports):
    dist.init_process_group("tutti", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=30))
    t = torch.full((1 << 16,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == n * (n + 1) / 2), t[:4]
    pg = dist.group.WORLD
    if rank == 0:
        # Rank 1 never joins this one: abort ends it from another thread.
        # Even rounds: a large all_reduce (tutti's worker thread runs it);
        # odd rounds: a small one, which runs in this thread and holds the
        # group's posting lock while it waits.
        timer = threading.Timer(0.3, tutti.torch.abort, args=(pg, f"round {i}: given up"))
        t0 = time.monotonic()
        try:
            if i % 2 == 0:
                work = dist.all_reduce(torch.ones(1 << 18), async_op=True)
                timer.start()
                work.wait()
            else:
                timer.start()
                dist.all_reduce(torch.ones(8))
            raise SystemExit("an aborted all_reduce returned")
        except RuntimeError as e:
            assert f"round {i}: given up" in str(e), e
        timer.join()
        del timer  # it holds the group, and with it torch's store (its sockets)
        assert time.monotonic() - t0 < 2.0
        err = tutti.torch.error(pg)
        assert isinstance(err, tutti.Aborted) and f"round {i}: given up" in str(err), repr(err)
    assert tutti.torch.error(dist.new_group([0, 1])) is None
    # A group derived from the world's communicator (rank 1's is healthy,
    # rank 0's is aborted: a derived group does not need its parent to work).
    g = dist.new_group(list(range(n)))
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=g)
    assert torch.all(t == n * (n + 1) / 2), t[:4]
    # Holding the backends (past the end of their groups) and a Work keeps
    # none of tutti's resources.
    held = (pg._get_backend(torch.device("cpu")), g._get_backend(torch.device("cpu")),
            work if rank == 0 and i % 2 == 0 else None)
    if i % 2 == 0:
        dist.destroy_process_group()
    else:
        dist.distributed_c10d._abort_process_group()
        assert not dist.is_initialized()
    del pg, g
    gc.collect()
    time.sleep(0.2)  # sockets torch's store closes in its own threads
    now = resources()
    assert now[3] == [], now  # no segment of a destroyed group is left
    assert now[1] == 0, now  # nor a socket
    seen.append(now[:3])
# No more threads, sockets or open files in the later rounds than in the
# first two: a leak of one a round would show 18 more.
early = [max(x[k] for x in seen[:2]) for k in range(3)]
late = [max(x[k] for x in seen[2:]) for k in range(3)]
assert all(late[k] <= early[k] for k in range(3)), seen
print("ok", seen)
