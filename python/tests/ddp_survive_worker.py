"""One rank of the DDP survival test (test_torch_survive.py).

"kill" (4 ranks): DDP on the default "tutti" group trains a small model with
SGD, each rank on its own data; before step 3 rank 3 is killed (SIGKILL).
The survivors' backward fails, tutti.torch.error() says why, and they shrink
the group (tutti.torch.shrink), save the parameters they hold (the state of
the last good step), rebuild DDP on the new group and train STEPS more
steps, each on the data of its new rank; new rank 0 saves the result.

"fresh" (3 ranks): a fresh 3-rank job loads the saved state and trains the
same STEPS steps on the same data; prints the largest difference to the
survivors' parameters and "ok" when it is at most 1e-6.
"""
import copy
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tutti
import tutti.torch

torch.set_num_threads(1)
mode, out_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
STEPS = 6
KILL_AT = 3

dist.init_process_group("tutti", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=30))


def make_model():
    torch.manual_seed(1234)  # the same initial parameters everywhere
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4))


def batch(r, step):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def step_once(model, opt, r, step):
    x, y = batch(r, step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def train(model, group, r, first, steps):
    # Small buckets: several all_reduces a step.
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for s in range(first, first + steps):
        step_once(ddp, opt, r, s)
    return ddp


if mode == "kill":
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    group = dist.group.WORLD
    try:
        for s in range(100):
            if s == KILL_AT and rank == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            step_once(ddp, opt, rank, s)
        raise SystemExit("training went on without rank 3")
    except RuntimeError as e:
        t0 = time.monotonic()
        assert "rank 3" in str(e) or "revoked" in str(e), e
    err = tutti.torch.error(group)
    assert isinstance(err, (tutti.PeerLost, tutti.Revoked)), repr(err)
    new_group = tutti.torch.shrink(group)
    assert time.monotonic() - t0 < 2.0, time.monotonic() - t0
    assert tutti.torch.failed_ranks(group) == [3], tutti.torch.failed_ranks(group)
    assert new_group.size() == 3 and dist.get_rank(new_group) == rank, (new_group.size(), dist.get_rank(new_group))
    assert dist.get_world_size(new_group) == 3
    module = copy.deepcopy(ddp.module)  # the state of the last good step, the same on every survivor
    del ddp, opt
    if rank == 0:
        torch.save(module.state_dict(), os.path.join(out_dir, "state.pt"))
    dist.barrier(group=new_group)
    ddp = train(module, new_group, dist.get_rank(new_group), 100, STEPS)
    if dist.get_rank(new_group) == 0:
        torch.save(ddp.module.state_dict(), os.path.join(out_dir, "after.pt"))
    dist.barrier(group=new_group)
    print("ok")
else:
    model = make_model()
    model.load_state_dict(torch.load(os.path.join(out_dir, "state.pt")))
    ddp = train(model, None, rank, 100, STEPS)
    after = torch.load(os.path.join(out_dir, "after.pt"))
    diff = max((p - after[k]).abs().max().item() for k, p in ddp.module.state_dict().items())
    moved = max((p - after[k]).abs().max().item() for k, p in make_model().state_dict().items())
    print(f"largest difference to the survivors: {diff:.3g} (to the initial parameters: {moved:.3g})")
    assert diff <= 1e-6 and moved > 1e-3, (diff, moved)
    print("ok")
