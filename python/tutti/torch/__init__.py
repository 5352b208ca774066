"""tutti as a torch.distributed backend (torch 2.x, CPU tensors).

    import torch.distributed as dist
    import tutti.torch                     # registers the backend "tutti"
    dist.init_process_group("tutti")       # or backend="cpu:tutti", a store, tcp://, file://

Every operation torch.distributed routes to a CPU backend, sync and async
(sparse COO tensors too, for all_reduce); rendezvous through the store torch
sets up. Operations record torch profiler events titled "tutti:<op>", as
gloo records "gloo:<op>".

Groups. new_group(), split_group() and shrink_group() on a tutti world make
their groups from the world's communicator, without a rendezvous through the
store, among the members alone.

Importing it also lets through, for tutti groups, what torch 2.13 refuses to
every backend but a few before it asks the group:
torch.distributed.monitored_barrier (gloo only),
torch.distributed.split_group (accelerator backends only) and DDP's
bf16_compress_hook (CUDA or XPU builds only); and DTensor's Shard -> Shard
redistribution on tutti meshes runs an all_to_all where torch gathers the
whole tensor on CPU. Other groups get torch's own functions. (A name bound
before the import, `from torch.distributed import monitored_barrier`, keeps
torch's function.)

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
import datetime as _datetime
import os
import sys as _sys

import torch
import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

import tutti as _tutti  # noqa: F401  (tutti.Error and its kinds for errors raised through torch)

from . import _C

BACKEND = "tutti"
_CPU = torch.device("cpu")


def _tutti_backend_of(pg):
    """The tutti backend of a ProcessGroup for CPU tensors, or None."""
    if pg is None or pg == _c10d.GroupMember.NON_GROUP_MEMBER:
        return None
    try:
        b = pg._get_backend(_CPU)
    except RuntimeError:
        return None
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps a backend in a checking wrapper.
    while hasattr(b, "wrapped_pg"):
        b = b.wrapped_pg
    return b if _C.is_tutti(b) else None


def _backend(group):
    pg = _c10d._get_default_group() if group is None else group
    b = _tutti_backend_of(pg)
    if b is None:
        raise TypeError(f"not a tutti process group (backend {_c10d.get_backend(pg)})")
    return b


def _create(dist_opts, backend_options):
    """torch's creator of a "tutti" backend (register_backend, extended API)."""
    ranks = list(dist_opts.global_ranks_in_group)
    timeout = dist_opts.timeout
    if ranks and _c10d.is_initialized():
        # A sub-group of the world (new_group): made from the default
        # group's communicator by its members alone, when that group is
        # tutti's. torch numbers the members as the default group does
        # (after shrink_group of the default group too).
        world = _tutti_backend_of(_c10d._get_default_group())
        if world is not None:
            b = _C.derive_backend(world, ranks, timeout, dist_opts.group_id)
            if b is None:
                raise RuntimeError(f"tutti: rank {world.rank()} is not among {ranks}")
            return b
    store = dist_opts.store
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        # torchrun's workers meet in its agent's store, which outlives a
        # restart of the group: torch 2.13 hands every attempt the same keys,
        # so a new attempt would read the addresses of the last one (gloo
        # then fails to connect). Each attempt gets keys of its own, as
        # torch's rendezvous used to give it.
        store = _dist.PrefixStore(f"tutti/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    return _C.create_backend(store, dist_opts.group_rank, dist_opts.group_size, timeout, dist_opts.group_id)


if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


# ---- what torch refuses before it asks a group --------------------------------------

def _make_monitored_barrier(torch_monitored_barrier):
    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        # torch's own checks and defaults, then the group's monitoredBarrier.
        if not _c10d._rank_not_in_group(group) and _tutti_backend_of(
                _c10d._get_default_group() if group is None else group) is not None:
            if timeout is None:
                timeout = _c10d._get_default_timeout(BACKEND)
            elif isinstance(timeout, (int, float)):
                timeout = _datetime.timedelta(seconds=timeout)
            _c10d._check_valid_timeout(timeout)
            g = _c10d._get_default_group() if group is None else group
            return g.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        return torch_monitored_barrier(group, timeout, wait_all_ranks)

    monitored_barrier.__doc__ = torch_monitored_barrier.__doc__
    monitored_barrier._tutti_wraps = torch_monitored_barrier
    return monitored_barrier


def _make_split_group(torch_split_group):
    def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None,
                    backend=None):
        # torch 2.13 asks for an accelerator bound to the default group
        # before it asks the parent's backend to split: for a tutti parent
        # (CPU) it runs ProcessGroup.split_group itself, with torch's checks
        # and torch's registration of the result.
        parent = parent_pg if parent_pg is not None else (
            _c10d._get_default_group() if _c10d.is_initialized() else None)
        if parent is None or _tutti_backend_of(parent) is None or backend is not None:
            return torch_split_group(parent_pg, split_ranks, timeout, pg_options, group_desc, backend)
        return _split_tutti_group(parent, split_ranks, timeout, pg_options, group_desc)

    split_group.__doc__ = torch_split_group.__doc__
    split_group._tutti_wraps = torch_split_group
    return split_group


def _split_tutti_group(parent_pg, split_ranks, timeout, pg_options, group_desc):
    if split_ranks is None or len(split_ranks) == 0:
        raise ValueError("split_ranks cannot be None or empty")
    world = _c10d._world
    default_pg = _c10d._get_default_group()
    global_rank = default_pg.rank()
    if parent_pg not in world.pg_group_ranks:
        raise ValueError(f"Group {parent_pg} is not registered")
    parent_global_to_group = world.pg_group_ranks[parent_pg]
    parent_group_to_global = {g: r for r, g in parent_global_to_group.items()}
    if global_rank not in parent_global_to_group:
        raise ValueError(f"Global rank {global_rank} is not part of the parent group {parent_pg}")
    parent_group_rank = parent_global_to_group[global_rank]
    if group_desc is None:
        group_desc = f"{parent_pg.group_desc}:split"
    if timeout is None:
        timeout = _c10d._get_default_timeout(BACKEND)
    _c10d._check_valid_timeout(timeout)
    my_group = sorted(split_ranks[0])
    for ranks in split_ranks:
        if len(ranks) == 0:
            raise ValueError("the split group cannot be empty")
        if len(ranks) > default_pg.size():
            raise ValueError("the split group's size should be less or equal to the world_size set by "
                             "init_process_group")
        if len(ranks) != len(set(ranks)):
            raise ValueError("the split group cannot have duplicate ranks")
        if parent_group_rank in ranks:
            my_group = sorted(ranks)
            break
    group_name = _c10d._process_group_name(my_group, use_hashed_name=True)
    split_pg = parent_pg.split_group(my_group, timeout=timeout, opts=pg_options, group_name=group_name,
                                     group_desc=group_desc)
    if split_pg is None:
        return None
    global_ranks = [parent_group_to_global[r] for r in my_group]
    _tutti_backend_of(split_pg)._set_sequence_number_for_group()
    parent_backend_str, _ = world.pg_map[parent_pg]
    # Registered as torch's split_group registers its result.
    _c10d._register_pg_in_world(
        split_pg, backend_name=_c10d.Backend(parent_backend_str), store=split_pg.get_group_store(),
        group_name=group_name, backend_config=str(_c10d.BackendConfig(_c10d.Backend(parent_backend_str))),
        rank_mapping={g: i for i, g in enumerate(global_ranks)})
    return split_pg


if not hasattr(_c10d.monitored_barrier, "_tutti_wraps"):
    _c10d.monitored_barrier = _make_monitored_barrier(_c10d.monitored_barrier)
    _dist.monitored_barrier = _c10d.monitored_barrier
if not hasattr(_c10d.split_group, "_tutti_wraps"):
    _c10d.split_group = _make_split_group(_c10d.split_group)
    _dist.split_group = _c10d.split_group


# DTensor redistributes Shard(i) -> Shard(j) on CPU meshes by an all_gather of
# the whole tensor and a chunk ("CPU process group does not support alltoall
# yet"): each rank receives the whole instead of its part. On a mesh dimension
# whose group is tutti's it runs torch's own all_to_all op instead
# (_dtensor::shard_dim_alltoall, the accelerator path). DTensor is patched
# when it is first imported, so that importing tutti.torch does not import it.
_DTENSOR = "torch.distributed.tensor.placement_types"


def _make_shard_dim_alltoall(torch_shard_dim_alltoall):
    import torch.distributed._functional_collectives as funcol

    def shard_dim_alltoall(input, gather_dim, shard_dim, mesh, mesh_dim):
        if mesh.device_type == "cpu" and not torch.compiler.is_compiling():
            name = funcol._resolve_group_name((mesh, mesh_dim))
            if _tutti_backend_of(_c10d._resolve_process_group(name)) is not None:
                return torch.ops._dtensor.shard_dim_alltoall(input, gather_dim, shard_dim, name)
        return torch_shard_dim_alltoall(input, gather_dim, shard_dim, mesh, mesh_dim)

    shard_dim_alltoall._tutti_wraps = torch_shard_dim_alltoall
    return shard_dim_alltoall


def _patch_dtensor(placement_types):
    import torch.distributed.tensor._collective_utils as cu
    if not hasattr(cu.shard_dim_alltoall, "_tutti_wraps"):
        cu.shard_dim_alltoall = _make_shard_dim_alltoall(cu.shard_dim_alltoall)
    placement_types.shard_dim_alltoall = cu.shard_dim_alltoall


class _DTensorHook:
    """A finder on sys.meta_path that patches DTensor once it is loaded."""

    @staticmethod
    def find_spec(name, path, target=None):
        if name != _DTENSOR:
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_dtensor(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if _DTENSOR in _sys.modules:
    _patch_dtensor(_sys.modules[_DTENSOR])
elif not any(isinstance(f, type) and f.__name__ == "_DTensorHook" for f in _sys.meta_path):
    _sys.meta_path.insert(0, _DTensorHook)


# DistributedDataParallel.register_comm_hook refuses bf16_compress_hook and
# bf16_compress_wrapper_hook by name unless torch was built with CUDA and
# NCCL or XPU, whatever the group. On a tutti group the hook runs as it is
# (bfloat16 all_reduce, accumulated in float32): the name check is skipped
# for it, every other check of torch's stays.
_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def _make_check_comm_hook(torch_check_comm_hook):
    import functools

    def _check_comm_hook(self, hook):
        if getattr(hook, "__name__", None) in _BF16_HOOKS and _tutti_backend_of(self.process_group) is not None:
            @functools.wraps(hook)
            def checked(*args, **kwargs):
                return hook(*args, **kwargs)

            checked.__name__ = "tutti_" + hook.__name__
            return torch_check_comm_hook(self, checked)
        return torch_check_comm_hook(self, hook)

    _check_comm_hook._tutti_wraps = torch_check_comm_hook
    return _check_comm_hook


from torch.nn.parallel import DistributedDataParallel as _DDP  # noqa: E402  (imported by torch.nn already)

if not hasattr(_DDP._check_comm_hook, "_tutti_wraps"):
    _DDP._check_comm_hook = _make_check_comm_hook(_DDP._check_comm_hook)


# ---- beyond torch's API ------------------------------------------------------------------

def abort(group=None, reason="abort() called"):
    """Fails every pending and later operation of a tutti group (default: the
    default group), from any thread; the group stays registered."""
    _C.abort(_backend(group), reason)


def error(group=None):
    """The error a tutti group failed with (a tutti.Error instance), or None."""
    return _C.error(_backend(group))


def failed_ranks(group=None):
    """The members of a tutti group known lost, in its numbering."""
    return _C.failed_ranks(_backend(group))


def empty(*size, dtype=None, group=None):
    """A CPU tensor of `size` in memory that every rank of `group` on this
    host maps (torch's SymmetricMemory, for CPUs). Collective: every rank of
    the group calls it, in the same order relative to the group's other
    operations; the sizes may differ. Collectives whose tensors are all such
    tensors read the peers' tensors in place instead of copying them through
    a segment (docs/torch.md, "Tensors in shared memory"). Each rank frees
    its tensor when it lets go of it, as any tensor; a group spanning hosts
    gets ordinary memory."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return _C.empty_shared(_backend(group), [int(d) for d in size],
                           torch.get_default_dtype() if dtype is None else dtype)


_all_reduce_backends = {}  # group (None: the default one) -> (the group, its tutti backend)


def all_reduce_(tensor, op=_dist.ReduceOp.SUM, group=None):
    """all_reduce of a contiguous CPU tensor in place on a tutti group,
    blocking, without torch.distributed's dispatch (no Work, no sequence
    number, no profiler event): what a tensor-parallel inference loop calls
    where it would call a hand-written shared-memory all_reduce. Every rank
    calls it in the same order as the group's other operations; on tensors
    from `empty` it reads the peers' tensors in place. Returns the tensor."""
    key = group
    cached = _all_reduce_backends.get(key)
    pg = _c10d._get_default_group() if group is None else group
    if cached is None or cached[0] is not pg:
        cached = (pg, _backend(pg))
        _all_reduce_backends[key] = cached
    return _C.all_reduce_(cached[1], tensor, op)


def trace_json(group=None):
    """The flight recorder of a tutti group (its last operations: what each
    was, which algorithm ran it, how long it took), as JSON text."""
    return _C.trace_json(_backend(group))


def inline_bytes(group=None):
    """The payload size up to which a tutti group runs operations in the
    calling thread (TUTTI_TORCH_INLINE_BYTES); None for other groups."""
    pg = _c10d._get_default_group() if group is None else group
    b = _tutti_backend_of(pg)
    return None if b is None else _C.inline_bytes(b)


def shrink(group=None):
    """A process group of the members of `group` (default: the default group)
    still alive, ranked in their order there, made by the survivors together
    (collective among them; members that die meanwhile are left out): ULFM's
    agreement, for when the survivors do not know who is lost. Usable with
    every torch.distributed call and with DistributedDataParallel, as a
    group from new_group is; the old group stays failed. (torch's
    shrink_group, which is told whom to leave out, works on tutti groups too.)"""
    pg = _c10d._get_default_group() if group is None else group
    new_backend, members = _C.shrink_alive(_backend(pg))
    world = _c10d._world
    old_ranks = world.pg_group_ranks.get(pg)
    to_global = {r: g for g, r in old_ranks.items()} if old_ranks else {r: r for r in members}
    backend_name, store = world.pg_map.get(pg, (BACKEND, None))
    name = f"{pg.group_name}:tutti_shrunk:{len(world.pg_names)}"
    new_pg = _c10d.ProcessGroup(_dist.PrefixStore(f"{name}/", store.clone() if store is not None else _dist.HashStore()),
                                new_backend.rank(), new_backend.size())
    new_pg._register_backend(_CPU, _c10d.ProcessGroup.BackendType.CUSTOM, new_backend)
    new_pg._set_default_backend(_c10d.ProcessGroup.BackendType.CUSTOM)
    new_pg._set_group_name(name)
    new_pg._set_group_desc(f"{pg.group_desc}:tutti_shrunk")
    # Registered as torch's new_group registers a group: the global rank of
    # each member, and its rank in the new group.
    _c10d._register_pg_in_world(
        pg=new_pg, backend_name=backend_name, store=store, group_name=name,
        backend_config=world.pg_backend_config.get(pg, f"cpu:{BACKEND}"),
        rank_mapping={to_global[r]: i for i, r in enumerate(members)}, add_to_default_tag=True)
    return new_pg
