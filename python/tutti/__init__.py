"""tutti: collective and point-to-point communication between processes.

    import numpy as np, tutti
    comm = tutti.init()                    # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    x = np.ones(1024, dtype=np.float32)
    comm.all_reduce(x)                     # in place, SUM
    work = comm.iall_reduce(x, op=tutti.AVG)
    work.wait()                            # x belongs to tutti until then

Buffers are any C-contiguous object with the buffer protocol (numpy arrays,
bytearray, memoryview, array.array); the element type comes from the buffer's
format, or from dtype= (bfloat16 data: pass uint16/int16 arrays with
dtype=tutti.bfloat16). Calls release the GIL while they wait. Errors are
tutti.Error (a RuntimeError) subclasses, one per kind: tutti.InvalidArgument,
tutti.Timeout, tutti.PeerLost, tutti.Mismatch, tutti.Aborted, tutti.Internal,
tutti.Unauthenticated, tutti.Revoked.

`comm.alloc_shared(nbytes)` gives memory every rank of the host maps:
collectives on arrays over it (numpy.frombuffer) read the peers' arrays
where they lie.

`import tutti.torch` registers "tutti" as a torch.distributed backend.
"""
from ._tutti import *  # noqa: F401,F403
from ._tutti import (  # noqa: F401
    ANY_SOURCE, Communicator, DataType, Error, ReduceOp, ReduceOpKind, SharedMemory, Store, TcpStoreServer, Work,
    __version__,
    dtype_size, file_store, init, memory_store, prefix_store, reduce_op_invalid_reason, tcp_store_client)

# Reduce operators as values (tutti.SUM, ..., tutti.premul_sum(0.5)).
SUM = ReduceOp(ReduceOpKind.SUM)
PRODUCT = ReduceOp(ReduceOpKind.PRODUCT)
MIN = ReduceOp(ReduceOpKind.MIN)
MAX = ReduceOp(ReduceOpKind.MAX)
AVG = ReduceOp(ReduceOpKind.AVG)
BAND = ReduceOp(ReduceOpKind.BAND)
BOR = ReduceOp(ReduceOpKind.BOR)
BXOR = ReduceOp(ReduceOpKind.BXOR)
premul_sum = ReduceOp.premul_sum

# Error classes by kind name ("Timeout" -> tutti.Timeout).
error_classes = {name: cls for name, cls in globals().items()
                 if isinstance(cls, type) and issubclass(cls, Error) and cls is not Error}
