"""One rank of test_reproducible.py's training runs: a small model trained
with DistributedDataParallel on tutti for a few SGD steps on each rank's
own random data, with torch.use_deterministic_algorithms(True) when argv[1]
is "deterministic". Rank 0 prints the SHA-256 of every parameter's bytes
after training; the test compares it between two runs.
"""
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tutti.torch  # noqa: F401

torch.set_num_threads(1)
if sys.argv[1] == "deterministic":
    torch.use_deterministic_algorithms(True)
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
dist.init_process_group("tutti", rank=rank, world_size=n)
torch.manual_seed(1234)  # same initial parameters everywhere
# Buckets of several sizes (about 4 KiB to 600 KiB of gradients), each size
# class timed by the tuner.
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 384), torch.nn.Tanh(), torch.nn.Linear(384, 384), torch.nn.Tanh(),
                                torch.nn.Linear(384, 16)), bucket_cap_mb=0.25)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(100 + rank)
for _ in range(int(os.environ.get("STEPS", "60"))):
    x = torch.randn(32, 64, generator=g)
    y = torch.randn(32, 16, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
# tutti.torch.all_reduce_ (no torch dispatch) follows the flag as well.
t = torch.full((1000,), 0.1 * (rank + 1))
tutti.torch.all_reduce_(t)
last = [e for e in json.loads(tutti.torch.trace_json())["ops"] if e.get("op") == "all_reduce"][-1]
if last.get("algo", "").startswith("reproducible") != (sys.argv[1] == "deterministic"):
    raise AssertionError(f"rank {rank}: all_reduce_ ran {last.get('algo')} with {sys.argv[1]} algorithms")
algos = tutti.torch.trace_json()
dist.destroy_process_group()
if rank == 0:
    print("reproducible" if '"algo":"reproducible' in algos else "plain", flush=True)
    print(h.hexdigest(), flush=True)
