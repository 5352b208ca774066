"""One rank of the process-group lifecycle test (test_torch_survive.py).

Six rounds, each a new default group on its own port (tcp:// init), then
destroy_process_group. In every round a pending all_reduce that rank 1 never
joins is ended by tutti.torch.abort from another thread: its Work fails with
tutti.Aborted naming the reason, and tutti.torch.error() reports it; then a
new group made on a new store prefix of the same job works. After every round
no shared-memory segment is left, and the last four rounds end with no more
threads or open files than the first two: nothing leaks.
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
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd")), shm


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
        work = dist.all_reduce(torch.ones(1 << 18), async_op=True)
        threading.Timer(0.3, tutti.torch.abort, args=(pg, f"round {i}: given up")).start()
        t0 = time.monotonic()
        try:
            work.wait()
            raise SystemExit("an aborted all_reduce returned")
        except RuntimeError as e:
            assert f"round {i}: given up" in str(e), e
        assert time.monotonic() - t0 < 2.0
        err = tutti.torch.error(pg)
        assert isinstance(err, tutti.Aborted) and f"round {i}: given up" in str(err), repr(err)
    assert tutti.torch.error(dist.new_group([0, 1])) is None
    # A group on a new store prefix of the same job (rank 1's default group
    # is still healthy, rank 0's is aborted: new_group goes through the store).
    g = dist.new_group(list(range(n)))
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=g)
    assert torch.all(t == n * (n + 1) / 2), t[:4]
    dist.destroy_process_group()
    del pg, g
    gc.collect()
    time.sleep(0.2)  # sockets torch's store closes in its own threads
    now = resources()
    assert now[2] == [], now  # no segment of a destroyed group is left
    seen.append(now[:2])
# No more threads or open files in the last rounds than in the first two: a
# leak of one a round would show four more.
early = [max(x[k] for x in seen[:2]) for k in (0, 1)]
late = [max(x[k] for x in seen[2:]) for k in (0, 1)]
assert late[0] <= early[0] and late[1] <= early[1], seen
print("ok", seen)
