#!/usr/bin/env python3
"""tutti-sim models every algorithm of the registry (tools/tutti-sim/).

For each collective, on a shape where the shared-memory form runs (4 ranks
on one host) and on one where the two-level form runs (8 ranks, 2 a host),
`tutti-sim --algo all --tsv` times every algorithm that can run there. Each
algorithm `tutti-config --algorithms` lists must come out with a finite,
positive time on at least one of the two shapes, and tutti-sim must exit 0:
an algorithm it has no model of is an error (a failed run), never a gap.

Usage: check_sim_models.py <tutti-sim> <tutti-config>
"""
import math
import re
import subprocess
import sys


def main():
    sim, config = sys.argv[1], sys.argv[2]
    table = subprocess.run([config, "--algorithms"], check=True, capture_output=True, text=True).stdout
    registry = {}
    for m in re.finditer(r"^\| (\w+) \| `(\w+)` \|", table, re.M):
        registry.setdefault(m.group(1), set()).add(m.group(2))
    if len(registry) != 9:
        sys.exit(f"tutti-config --algorithms lists {len(registry)} collectives, expected 9")
    problems = []
    for coll, names in sorted(registry.items()):
        timed = set()
        for ranks, per_host in ((4, 4), (8, 2)):
            cmd = [sim, "--coll", coll, "--ranks", str(ranks), "--per-host", str(per_host), "--algo", "all",
                   "--sizes", "8,64K,4M", "--tsv"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                problems.append(f"{' '.join(cmd[1:])}: exit {r.returncode}: {r.stderr.strip()}")
                continue
            for line in r.stdout.splitlines():
                f = line.split("\t")
                if len(f) < 8 or f[4] == "table":
                    continue
                seconds = float(f[5])
                if math.isfinite(seconds) and seconds > 0:
                    timed.add(f[4])
        missing = names - timed
        if missing:
            problems.append(f"{coll}: no time for {', '.join(sorted(missing))} on 4 ranks on one host nor on 8 ranks, 2 a host")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok: every algorithm of {len(registry)} collectives modeled "
          f"({sum(len(v) for v in registry.values())} algorithms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
