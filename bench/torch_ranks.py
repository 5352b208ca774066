"""Local ranks for the torch benchmarks (bench/torch/, bench/ddp/).

run_ranks(n, argv) starts `python argv...` as ranks 0..n-1 of one job on
loopback (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, one
OpenMP thread each, gloo on `lo`; LOCAL_RANK too with local_rank; another
interpreter with python), waits for all, and returns what rank 0 printed
last, as JSON. A rank that exits with a non-zero status raises
RankFailed (its rank, status and the tail of its stderr).
"""
import json
import os
import socket
import subprocess
import sys


class RankFailed(Exception):
    def __init__(self, rank, code, stderr):
        super().__init__(f"rank {rank} failed ({code}):\n{stderr[-3000:]}")
        self.rank = rank
        self.code = code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(n, argv, env=None, timeout=1800, python=None, local_rank=False):
    port = str(free_port())
    procs = []
    for r in range(n):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                 OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        if local_rank:
            e["LOCAL_RANK"] = str(r)
        e.update(env or {})
        procs.append(subprocess.Popen([python or sys.executable] + [str(x) for x in argv], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for r, (p, (_, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RankFailed(r, p.returncode, err)
    return json.loads(outs[0][0].strip().splitlines()[-1])
