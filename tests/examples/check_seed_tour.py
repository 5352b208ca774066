#!/usr/bin/env python3
"""Runs the seed tour under tuttirun on N ranks and checks every rank's lines
against the values of the tutorial (generalized to N ranks as in
shared/seed/README.md).

    check_seed_tour.py TUTTIRUN SEED_TOUR N
    check_seed_tour.py --run N [--hosts K] [--logs TEXT]... -- LAUNCH COMMAND...
        (srun, mpirun, mpiexec: any line prefix)

--hosts K: every rank must log "joined: rank R of N on K host(s)" (run with
TUTTI_LOG=info or more). --logs TEXT: every rank must log a line containing
TEXT (tutti's log lines, "[tutti TIME rank R pid P LEVEL] ...", on stderr).
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
    need_logs = []  # functions of a rank: the text its log must contain
    if sys.argv[1] == "--run":
        n, tagged = int(sys.argv[2]), False
        args = sys.argv[3:]
        while args and args[0] != "--":
            if args[0] == "--hosts" and len(args) > 1:
                k = int(args[1])
                need_logs.append(lambda r, k=k: f"joined: rank {r} of {n} on {k} host(s)")
            elif args[0] == "--logs" and len(args) > 1:
                need_logs.append(lambda r, t=args[1]: t)
            else:
                sys.exit(f"check_seed_tour.py: unknown option {args[0]!r}")
            args = args[2:]
        if not args:
            sys.exit("check_seed_tour.py: --run N [options] -- LAUNCH COMMAND...")
        cmd = args[1:]
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
    logs = {}
    for line in out.stderr.splitlines():
        m = re.search(r"\[tutti \S+ rank (\d+) pid \d+ \w+\] (.*)$", line)
        if m:
            logs.setdefault(int(m[1]), []).append(m[2])
    for want in need_logs:
        missing = [r for r in range(n) if not any(want(r) in line for line in logs.get(r, []))]
        if missing:
            print(out.stdout, out.stderr)
            sys.exit(f"ranks {missing} did not log {want(missing[0])!r}")
        print(f"every rank logged {want(0)!r}" if want(0) == want(n - 1) else
              f"every rank logged {want(0)!r} .. {want(n - 1)!r}")
    print(f"seed tour on {n} ranks: {len(got)} lines checked, all as the tutorial says")


if __name__ == "__main__":
    main()
