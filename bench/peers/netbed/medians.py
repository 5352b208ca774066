#!/usr/bin/env python3
"""Medians per size of compare.sh runs, every system side by side, and which is fastest.

    python3 bench/peers/netbed/medians.py RAW [RAW ...]

RAW: compare.sh's output ("== SYSTEM rep N", then "size time_us algbw busbw wrong" rows). The
first system is the reference: the last column is its time over the fastest's. A row whose check
failed is printed as WRONG.
"""
import sys, statistics, collections, re
for f in sys.argv[1:]:
    d = collections.defaultdict(lambda: collections.defaultdict(list)); sysname = None
    for l in open(f):
        m = re.match(r"== (\S+) rep", l)
        if m: sysname = m.group(1); continue
        p = l.split()
        if sysname and len(p) == 5 and p[0].isdigit():
            d[sysname][int(p[0])].append(float(p[1]))
            if p[4] != "0": print("WRONG", f, sysname, p)
    systems = list(d)
    print("##", f, "(medians of", len(next(iter(d[systems[0]].values()))), "runs, us)")
    print("size".rjust(9), *[s.rjust(16) for s in systems], " fastest/table")
    for size in sorted(d[systems[0]]):
        meds = [statistics.median(d[s][size]) for s in systems]
        best = min(range(len(systems)), key=lambda i: meds[i])
        print(str(size).rjust(9), *[f"{m:16.1f}" for m in meds], f" {systems[best]} {meds[0]/meds[best]:.2f}")
