#!/usr/bin/python3
"""reproducible_cost.py: what reproducible sums cost, side by side with the
usual ones on this machine (docs/performance.md, "Reproducible sums").

  python3 bench/reproducible_cost.py [--ranks 2,4] [--transports shm,tcp] [--reps 5]
                                     [-b 8] [-e 16M] [-f 8] [-n 100] [-d float32]

For each transport and rank count, runs `tuttirun -n N tutti-bench
all_reduce` with TUTTI_REPRODUCIBLE=0 and =1 alternately, the order
rotating from one repetition to the next, REPS times each; per size the
median time of each (medians of REPS runs) and their ratios: latency
(reproducible / usual) and bus bandwidth (usual / reproducible time).
Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(n, transport, mode, a):
    fd, path = tempfile.mkstemp(prefix="tutti-repro-cost-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, TUTTI_REPRODUCIBLE=mode)
    if transport == "tcp":
        env["TUTTI_TRANSPORT"] = "tcp"
    cmd = [os.path.join(ROOT, "build", "bin", "tuttirun"), "-n", str(n), os.path.join(ROOT, "build", "bin", "tutti-bench"),
           "all_reduce", "-b", a.b, "-e", a.e, "-f", str(a.f), "-n", str(a.n), "-w", str(max(5, a.n // 10)), "-d", a.d,
           "--json", path]
    try:
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=1800)
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    finally:
        os.unlink(path)
    if any(r["wrong"] for r in rows):
        raise SystemExit(f"wrong elements: {cmd} with TUTTI_REPRODUCIBLE={mode}")
    return {r["bytes"]: r["time_us"] for r in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--transports", default="shm,tcp")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="16M")
    p.add_argument("-f", type=int, default=8)
    p.add_argument("-n", type=int, default=100)
    p.add_argument("-d", default="float32")
    a = p.parse_args()
    print(f"| transport | ranks | size | usual (us) | reproducible (us) | latency x | busbw ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for transport in a.transports.split(","):
        for n in (int(x) for x in a.ranks.split(",")):
            times = {"0": {}, "1": {}}
            for rep in range(a.reps):
                for mode in (("0", "1") if rep % 2 == 0 else ("1", "0")):
                    for size, t in run(n, transport, mode, a).items():
                        times[mode].setdefault(size, []).append(t)
                print(f"{transport} n={n}: repetition {rep + 1} done", file=sys.stderr, flush=True)
            for size in sorted(times["0"]):
                u, r = statistics.median(times["0"][size]), statistics.median(times["1"][size])
                print(f"| {transport} | {n} | {size} | {u:.2f} | {r:.2f} | {r / u:.2f} | {u / r:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
