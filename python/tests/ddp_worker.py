"""One rank of the DistributedDataParallel test (test_torch_ddp.py).

The same small model, from the same initial parameters, trained for a few
SGD steps on each rank's own random data three times: with DDP on a "gloo"
group, on the default "tutti" group (small buckets: gradients reduced in the
calling thread) and on a "tutti" group that runs every operation
asynchronously (futures completed by the completion thread). Prints the
largest parameter difference to gloo, and "ok" when it is at most 1e-6 and
every rank ends with the same parameters.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tutti.torch  # noqa: F401

torch.set_num_threads(1)
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
STEPS = 5

dist.init_process_group("tutti", rank=rank, world_size=n)
gloo = dist.new_group(list(range(n)), backend="gloo")
os.environ["TUTTI_TORCH_INLINE_BYTES"] = "0"
tutti_async = dist.new_group(list(range(n)))
del os.environ["TUTTI_TORCH_INLINE_BYTES"]

torch.manual_seed(1234)  # same initial parameters everywhere
base = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                           torch.nn.Linear(32, 4))


def say(line):
    """One line in one write: under torchrun both ranks write to one file,
    and print's separate write of the newline let their lines run together."""
    os.write(1, (line + "\n").encode())


def train(group, bucket_cap_mb):
    model = DDP(copy.deepcopy(base), process_group=group, bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.module.parameters()]


# Small buckets: several allreduces per step.
ref = train(gloo, 0.001)
results = {"tutti": train(None, 0.001), "tutti async": train(tutti_async, 0.001), "tutti one bucket": train(None, 25)}

ok = True
for name, params in results.items():
    diff = max((a - b).abs().max().item() for a, b in zip(ref, params))
    say(f"rank {rank}: {name}: largest difference to gloo {diff:.3g}")
    ok = ok and diff <= 1e-6
    # every rank ends with the same parameters
    for p in params:
        q = p.clone()
        dist.broadcast(q, 0)
        ok = ok and torch.equal(p, q)
moved = max((a - b).abs().max().item() for a, b in zip(ref, base.parameters()))
ok = ok and moved > 1e-3  # the training did change the parameters
dist.barrier()
dist.destroy_process_group()
say("ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
