"""tutti as a torch.distributed backend.

    import torch.distributed as dist
    import tutti.torch                     # registers the backend "tutti"
    dist.init_process_group("tutti", rank=rank, world_size=size)

Every operation of torch.distributed on CPU tensors (sparse COO tensors too,
for all_reduce); rendezvous through the store torch sets up (env://, tcp://
and file:// init methods). Operations record torch profiler events titled
"tutti:<op>", as gloo records "gloo:<op>".

Importing it also lets torch.distributed.monitored_barrier run on tutti
groups: torch 1.13 refuses every backend but gloo there, before it asks the
group. (A name bound before the import, `from torch.distributed import
monitored_barrier`, keeps torch's own function.)

tutti.torch.work_exception(work) returns a finished Work's error as a Python
exception (torch 1.13's Work.exception() cannot convert its result, whatever
the backend).

Carrying on after a failure (docs/torch.md, "After a failure"):

    try:
        loss.backward(); opt.step()
    except RuntimeError:
        group = tutti.torch.shrink(group)  # the survivors, usable at once
        model = DDP(copy.deepcopy(model.module), process_group=group)

tutti.torch.abort(group) fails every pending and later operation of a group
from any thread; tutti.torch.error(group) is the error a group failed with
(None while it works); tutti.torch.failed_ranks(group) the members known lost.
"""
import torch  # noqa: F401  (loads libtorch and the c10d bindings the extension uses)
import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

import tutti as _tutti  # noqa: F401  (tutti.Error and its kinds for errors raised through torch)

from ._C import abort, create_process_group, error, failed_ranks, inline_bytes, work_exception  # noqa: F401
from ._C import shrink_group as _shrink_group

BACKEND = "tutti"


def _create(store, rank, size, timeout):
    return create_process_group(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, _create)


def _make_monitored_barrier(torch_monitored_barrier):
    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        # torch's own checks and defaults, then the group's monitoredBarrier.
        if not _c10d._rank_not_in_group(group) and _c10d.get_backend(group) == BACKEND:
            if timeout is None:
                timeout = _c10d.default_pg_timeout
            g = _c10d._get_default_group() if group is None else group
            return g.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        return torch_monitored_barrier(group, timeout, wait_all_ranks)

    monitored_barrier.__doc__ = torch_monitored_barrier.__doc__
    monitored_barrier._tutti_wraps = torch_monitored_barrier
    return monitored_barrier


if not hasattr(_c10d.monitored_barrier, "_tutti_wraps"):
    _c10d.monitored_barrier = _make_monitored_barrier(_c10d.monitored_barrier)
    _dist.monitored_barrier = _c10d.monitored_barrier


def shrink(group=None):
    """A process group of the members of `group` (default: the default group)
    still alive, ranked in their order there, made by the survivors together
    (collective among them; members that die meanwhile are left out). Usable
    with every torch.distributed call and with DistributedDataParallel, as a
    group from new_group is; the old group stays failed."""
    pg = _c10d._get_default_group() if group is None else group
    new_pg, members = _shrink_group(pg)
    # Registered as torch's new_group registers a group: the global rank of
    # each member, and its rank in the new group.
    old_ranks = _c10d._pg_group_ranks.get(pg)
    to_global = {r: g for g, r in old_ranks.items()} if old_ranks else {r: r for r in members}
    _c10d._pg_group_ranks[new_pg] = {to_global[r]: i for i, r in enumerate(members)}
    backend, store = _c10d._pg_map.get(pg, (BACKEND, None))
    _c10d._pg_map[new_pg] = (backend, store)
    _c10d._pg_names[new_pg] = "tutti_shrunk_" + str(len(_c10d._pg_names))
    return new_pg
