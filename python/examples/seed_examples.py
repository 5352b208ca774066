"""The nine torch.distributed examples of the seed tutorial, as written there,
with two changes: CPU tensors (torch.device("cpu") where the tutorial has
torch.device("cuda", rank)) and the backend named on the command line
("tutti" or "gloo"; the tutorial's default is "nccl").

  .venv/bin/python python/examples/seed_examples.py [BACKEND] [WORLD_SIZE] [EXAMPLE ...]

Runs the examples one after the other in one set of processes started the
tutorial's way (torch.multiprocessing, spawn; MASTER_ADDR 127.0.0.1 and
MASTER_PORT 29500 unless set): each example creates its group as the
tutorial does. An example that raises prints "Rank r: <example> raised
<error>" and the others go on (with more than two ranks, p2p_unblock_func
raises on ranks other than 0 and 1, whose `req` the tutorial never sets).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tutti.torch  # noqa: F401  registers the backend "tutti"

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "tutti"


def init_process(rank, size, fn, backend=BACKEND):
    """
    為每個進程初始化分布式環(huán)境，保證相互之間可以通信，并調(diào)用函數(shù)fn。
    """
    os.environ['MASTER_ADDR'] = os.environ.get('MASTER_ADDR', '127.0.0.1')
    os.environ['MASTER_PORT'] = os.environ.get('MASTER_PORT', '29500')
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


def run(world_size, func):
    """
    啟動world_size個進程，并執(zhí)行函數(shù)func。
    """
    processes = []
    mp.set_start_method("spawn")
    for rank in range(world_size):
        p = mp.Process(target=init_process, args=(rank, world_size, func))
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
    return [p.exitcode for p in processes]


def p2p_block_func(rank, size):
    """
    將rank src上的tensor發(fā)送至rank dst(阻塞)。
    """
    src = 0
    dst = 1
    group = dist.new_group(list(range(size)))
    # 對于rank src，該tensor用于發(fā)送
    # 對于rank dst，該tensor用于接收
    tensor = torch.zeros(1).to(torch.device("cpu"))
    if rank == src:
        tensor += 1
        # 發(fā)送tensor([1.])
        # group指定了該操作所見進程的范圍，默認情況下是整個world
        dist.send(tensor=tensor, dst=1, group=group)
    elif rank == dst:
        # rank dst的tensor初始化為tensor([0.])，但接收后為tensor([1.])
        dist.recv(tensor=tensor, src=0, group=group)
    print('Rank ', rank, ' has data ', tensor)


def p2p_unblock_func(rank, size):
    """
    將rank src上的tensor發(fā)送至rank dst(非阻塞)。
    """
    src = 0
    dst = 1
    group = dist.new_group(list(range(size)))
    tensor = torch.zeros(1).to(torch.device("cpu"))
    if rank == src:
        tensor += 1
        # 非阻塞發(fā)送
        req = dist.isend(tensor=tensor, dst=dst, group=group)
        print("Rank 0 started sending")
    elif rank == dst:
        # 非阻塞接收
        req = dist.irecv(tensor=tensor, src=src, group=group)
        print("Rank 1 started receiving")
    req.wait()
    print('Rank ', rank, ' has data ', tensor)


def broadcast_func(rank, size):
    src = 0
    group = dist.new_group(list(range(size)))
    if rank == src:
        # 對于rank src，初始化tensor([1.])
        tensor = torch.zeros(1).to(torch.device("cpu")) + 1
    else:
        # 對于非rank src，初始化tensor([0.])
        tensor = torch.zeros(1).to(torch.device("cpu"))
    # 對于rank src，broadcast是發(fā)送；否則，則是接收
    dist.broadcast(tensor=tensor, src=0, group=group)
    print('Rank ', rank, ' has data ', tensor)


def reduce_func(rank, size):
    dst = 1
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1).to(torch.device("cpu"))
    # 對于所有rank都會發(fā)送, 但僅有dst會接收求和的結(jié)果
    dist.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor)


def allreduce_func(rank, size):
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1).to(torch.device("cpu"))
    # tensor即用來發(fā)送，也用來接收
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor)


def gather_func(rank, size):
    dst = 1
    group = dist.new_group(list(range(size)))
    # 該tensor用于發(fā)送
    tensor = torch.zeros(1).to(torch.device("cpu")) + rank
    gather_list = []
    if rank == dst:
        # gather_list中的tensor數(shù)量應該是size個，用于接收其他rank發(fā)送來的tensor
        gather_list = [torch.zeros(1).to(torch.device("cpu")) for _ in range(size)]
        # 僅在rank dst上需要指定gather_list
        dist.gather(tensor, gather_list=gather_list, dst=dst, group=group)
    else:
        # 非rank dst，相當于發(fā)送tensor
        dist.gather(tensor, dst=dst, group=group)
    print('Rank ', rank, ' has data ', gather_list)


def allgather_func(rank, size):
    group = dist.new_group(list(range(size)))
    # 該tensor用于發(fā)送
    tensor = torch.zeros(1).to(torch.device("cpu")) + rank
    # gether_list用于接收各個rank發(fā)送來的tensor
    gather_list = [torch.zeros(1).to(torch.device("cpu")) for _ in range(size)]
    dist.all_gather(gather_list, tensor, group=group)
    # 各個rank的gather_list均一致
    print('Rank ', rank, ' has data ', gather_list)


def scatter_func(rank, size):
    src = 0
    group = dist.new_group(list(range(size)))
    # 各個rank用于接收的tensor
    tensor = torch.empty(1).to(torch.device("cpu"))
    if rank == src:
        # 在rank src上，將tensor_list中的tensor分發(fā)至不同的rank上
        # tensor_list：[tensor([1.]), tensor([2.])]
        tensor_list = [torch.tensor([i + 1], dtype=torch.float32).to(torch.device("cpu")) for i in range(size)]
        # 將tensor_list發(fā)送至各個rank
        # 接收屬于rank src的那部分tensor
        dist.scatter(tensor, scatter_list=tensor_list, src=0, group=group)
    else:
        # 接收屬于對應rank的tensor
        dist.scatter(tensor, scatter_list=[], src=0, group=group)
    # 每個rank都擁有tensor_list中的一部分tensor
    print('Rank ', rank, ' has data ', tensor)


def reduce_scatter_func(rank, size):
    group = dist.new_group(list(range(size)))
    # 用于接收的tensor
    tensor = torch.empty(1).to(torch.device("cpu"))
    # 用于發(fā)送的tensor列表
    # 對于每個rank，有tensor_list=[tensor([0.]), tensor([1.])]
    tensor_list = [torch.Tensor([i]).to(torch.device("cpu")) for i in range(size)]
    # step1. 經(jīng)過reduce的操作會得到tensor列表[tensor([0.]), tensor([2.])]
    # step2. tensor列表[tensor([0.]), tensor([2.])]分發(fā)至各個rank
    # rank 0得到tensor([0.])，rank 1得到tensor([2.])
    dist.reduce_scatter(tensor, tensor_list, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor)


EXAMPLES = [p2p_block_func, p2p_unblock_func, broadcast_func, reduce_func, allreduce_func, gather_func,
            allgather_func, scatter_func, reduce_scatter_func]


def selected():
    names = sys.argv[3:]
    return [f for f in EXAMPLES if not names or f.__name__ in names]


class LineWriter:
    """Standard output that writes each whole line with one write(2), so that
    the lines of different ranks never mix (print writes its pieces apart)."""

    def __init__(self):
        self.pending = ""

    def write(self, text):
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            os.write(1, (line + "\n").encode())
        return len(text)

    def flush(self):
        pass


def all_examples(rank, size):
    """The selected examples in turn, each introduced by a line of its own."""
    sys.stdout = LineWriter()
    for fn in selected():
        dist.barrier()  # one example at a time on every rank
        print(f"Rank {rank}: == {fn.__name__}")
        try:
            fn(rank, size)
        except Exception as e:  # noqa: BLE001  reported, then the next example
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"Rank {rank}: {fn.__name__} raised {type(e).__name__}: {msg}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    codes = run(world_size, all_examples)
    sys.exit(0 if all(c == 0 for c in codes) else 1)
