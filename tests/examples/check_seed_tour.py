#!/usr/bin/env python3
"""Runs the seed tour under tuttirun on N ranks and checks every rank's lines
against the values of the tutorial (generalized to N ranks as in
shared/seed/README.md).

    check_seed_tour.py TUTTIRUN SEED_TOUR N
    check_seed_tour.py --run N -- LAUNCH COMMAND...   (srun, mpirun, mpiexec: any line prefix)
"""
import re
import subprocess
import sys


def fmt(v):
    return f"{int(v)}."


def tensor(vals):
    return "[" + ", ".join(fmt(v) for v in vals) + "]"


def expected(rank, n):
    dst = 1 if n >= 2 else 0
    e = {
        "p2p_block": tensor([1 if rank <= 1 and n >= 2 else 0]),
        "p2p_unblock": tensor([1 if rank <= 1 and n >= 2 else 0]),
        "broadcast": tensor([1]),
        "all_reduce": tensor([n]),
        "gather": "[" + ", ".join(tensor([r]) for r in range(n)) + "]" if rank == dst else "[]",
        "all_gather": "[" + ", ".join(tensor([r]) for r in range(n)) + "]",
        "scatter": tensor([rank + 1]),
        "reduce_scatter": tensor([rank * n]),
    }
    if rank == dst:
        e["reduce"] = tensor([n])
    return e


def main():
    if sys.argv[1] == "--run":
        n, cmd, tagged = int(sys.argv[2]), sys.argv[4:], False
    else:
        tuttirun, tour, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        cmd, tagged = [tuttirun, "-n", str(n), "--tag-output", "--timeout", "120", tour], True
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        sys.exit(f"seed tour on {n} ranks exited with {out.returncode}")
    got = {}
    for line in out.stdout.splitlines():
        if tagged:
            m = re.match(r"\[(\d+)\] (\w+)\s+Rank (\d+) has data (.*)$", line)
            if m:
                tag, example, rank, data = int(m[1]), m[2], int(m[3]), m[4]
                assert tag == rank, line
                got[(rank, example)] = data
        else:
            m = re.search(r"(\w+)\s+Rank (\d+) has data (.*)$", line)
            if m:
                example, rank, data = m[1], int(m[2]), m[3]
                assert (rank, example) not in got, f"two lines for rank {rank} {example}"
                got[(rank, example)] = data
    bad = 0
    for rank in range(n):
        for example, want in expected(rank, n).items():
            have = got.get((rank, example))
            if have != want:
                print(f"rank {rank} {example}: got {have!r}, expected {want!r}")
                bad += 1
    if bad:
        print(out.stdout)
        sys.exit(f"{bad} wrong lines")
    print(f"seed tour on {n} ranks: {len(got)} lines checked, all as the tutorial says")


if __name__ == "__main__":
    main()
