#!/usr/bin/env python3
"""Plots bench/startup/run.sh outputs: seconds against ranks, one line per system.

    python3 bench/startup/plot.py OUT.png RUN.txt [RUN.txt ...]

Reads the "run SYSTEM n=N rep=R: T s" lines of every file given (several
files: several run.sh invocations, e.g. the MPIs up to 256 ranks and tutti
beyond) and plots each system's median per rank count, log-log, with the
2x-per-doubling slope for reference.
"""
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = {}
    for path in sys.argv[2:]:
        for line in open(path):
            m = re.match(r"run (\S+) n=(\d+) rep=\d+: ([\d.]+) s", line)
            if m:
                runs.setdefault(m.group(1), {}).setdefault(int(m.group(2)), []).append(float(m.group(3)))
    if not runs:
        sys.exit("no runs found")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system in sorted(runs):
        ns = sorted(runs[system])
        ax.plot(ns, [statistics.median(runs[system][n]) for n in ns], marker="o", label=system)
    lo = min(min(r) for r in runs.values())
    first = runs["tutti"][lo] if "tutti" in runs and lo in runs["tutti"] else None
    if first:
        ns = sorted(runs["tutti"])
        ax.plot(ns, [statistics.median(first) * n / lo for n in ns], linestyle=":", color="gray",
                label="2x per doubling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks on one host (2 CPUs)")
    ax.set_ylabel("seconds: init + barrier + 8 B all_reduce")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
