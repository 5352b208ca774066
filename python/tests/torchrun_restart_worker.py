"""A torchrun worker for the restart test (test_torch_survive.py): on the
first attempt rank 1 exits with an error after one all_reduce, and torchrun
(--max_restarts=1) restarts the whole group, which rendezvouses again on the
same port; the second attempt completes."""
import datetime
import os

import torch
import torch.distributed as dist

import tutti.torch  # noqa: F401

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("tutti", timeout=datetime.timedelta(seconds=30))
rank, n = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == n * (n + 1) / 2), t[:4]
print(f"attempt {attempt} rank {rank} sum {t[0].item():g} port {os.environ['MASTER_PORT']}", flush=True)
if attempt == 0 and rank == 1:
    os._exit(3)
if attempt == 0:
    dist.barrier()  # rank 1 is gone: torchrun stops this rank
for _ in range(10):
    dist.all_reduce(t)
dist.destroy_process_group()
print(f"attempt {attempt} rank {rank} done", flush=True)
