"""What the torch workers look at from outside the operations
(torch_conventions_worker.py, parallel_worker.py)."""
import os

import torch.distributed as dist


def sockets():
    """The sockets this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def met_in_store(group):
    """Whether tutti's rendezvous left its keys in the group's store (torch
    adds a "/" to each prefix)."""
    return dist.distributed_c10d._world.pg_map[group][1].check(["cpu//tutti/job_id"])
