"""tutti as a torch.distributed backend.

    import torch.distributed as dist
    import tutti.torch                     # registers the backend "tutti"
    dist.init_process_group("tutti", rank=rank, world_size=size)

Every operation of torch.distributed on CPU tensors; rendezvous through the
store torch sets up (env://, tcp:// and file:// init methods).

tutti.torch.work_exception(work) returns a finished Work's error as a Python
exception (torch 1.13's Work.exception() cannot convert its result, whatever
the backend).
"""
import torch  # noqa: F401  (loads libtorch and the c10d bindings the extension uses)
import torch.distributed as _dist

import tutti as _tutti  # noqa: F401  (tutti.Error and its kinds for errors raised through torch)

from ._C import create_process_group, inline_bytes, work_exception  # noqa: F401

BACKEND = "tutti"


def _create(store, rank, size, timeout):
    return create_process_group(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, _create)
