#!/usr/bin/env python3
"""docs/performance.md's one-host ratio tables from compare.py's JSON files.

    summary.py [--peers openmpi,mpich] [--self tutti] [--worst] [RESULTS_DIR ...]

Reads every COLL_nN.json in the RESULTS_DIRs (default build/peers/results;
files of one collective and world size in several directories are merged by
size) and prints one Markdown row per collective and world size: by message
size, the best peer's median time / tutti's median time (> 1: tutti faster;
--self torch-tutti compares the torch backend instead). Only
figures that compare.py's direct check reproduced count: where no listed peer
has a verified figure at a size, or where a peer's unverified figure (its
median, or its direct run) is faster than every verified one, the cell says
"unverified" instead of a ratio. A ratio below 1 is bold. With --worst, one
row per collective and world size with each peer's worst verified ratio up to
64 KiB and from 1 MiB up (and how many sizes were unverified there).
"""
import argparse
import glob
import json
import os
import re

ORDER = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"]


def fmt_size(b):
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def cell(tutti, peers):
    """The ratio cell for one size: tutti's median row, {peer: median row}."""
    if not tutti or tutti["time_us"] <= 0 or not peers:
        return ""
    verified, doubtful = [], []
    for row in peers.values():
        ok = row.get("direct_us") is None or abs(row["direct_us"] / row["time_us"] - 1) <= 0.2
        (verified if ok else doubtful).append(row)
    if not verified:
        return "unverified"
    best = min(r["time_us"] for r in verified)
    for r in doubtful:
        if min(r["time_us"], r.get("direct_us") or r["time_us"]) < best:
            return "unverified"
    ratio = best / tutti["time_us"]
    text = f"{ratio:.2f}"
    return f"**{text}**" if ratio < 1 else text


def worst(tables, wanted):
    ranges = (("up to 64 KiB", 0, 64 << 10), ("from 1 MiB", 1 << 20, 1 << 62))
    print("| collective, ranks | " + " | ".join(f"vs {s} {r[0]}" for s in wanted for r in ranges) + " |")
    print("|---|" + "---:|" * (len(wanted) * len(ranges)))
    for _, n, coll, med, peers, _date in tables:
        cells = []
        for s in wanted:
            for _name, lo, hi in ranges:
                if s not in peers:
                    cells.append("n/a")
                    continue
                got, skipped = [], 0
                for k, row in med[s].items():
                    t = med["tutti"].get(k)
                    if not (lo <= int(k) <= hi) or not t or t["time_us"] <= 0:
                        continue
                    if cell(t, {s: row}) == "unverified":
                        skipped += 1
                    else:
                        got.append(row["time_us"] / t["time_us"])
                text = f"{min(got):.1f}×" if got else "-"
                cells.append(text + (f" ({skipped} unverified)" if skipped else ""))
        print(f"| {coll}, {n} | " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="*", default=[os.path.join("build", "peers", "results")])
    p.add_argument("--self", dest="me", default="tutti", help="the system the ratios are of (tutti, torch-tutti)")
    p.add_argument("--peers", default="openmpi,mpich")
    p.add_argument("--worst", action="store_true", help="each peer's worst ratio up to 64 KiB and from 1 MiB")
    a = p.parse_args()
    wanted = a.peers.split(",")
    merged = {}  # (coll, n) -> (median by system, dates)
    for d_ in a.results:
        for path in glob.glob(os.path.join(d_, "*_n*.json")):
            m = re.match(r"(.+)_n(\d+)\.json$", os.path.basename(path))
            if not m or m.group(1) not in ORDER:
                continue
            with open(path) as f:
                d = json.load(f)
            med, dates = merged.setdefault((m.group(1), int(m.group(2))), ({}, []))
            for s, rows in d["median"].items():
                # Our own system under the name "tutti" from here on.
                med.setdefault("tutti" if s == a.me else s, {}).update(rows)
            dates.append(d.get("date", ""))
    tables = []
    for (coll, n), (med, dates) in merged.items():
        peers = [s for s in wanted if s in med and med[s]]
        if "tutti" not in med or not peers:
            continue
        tables.append((ORDER.index(coll), n, coll, med, peers, min(dates)))
    tables.sort()
    if a.worst:
        return worst(tables, wanted)
    sizes = sorted({int(b) for t in tables for s in ["tutti"] for b in t[3][s]})
    print("| collective, ranks | " + " | ".join(fmt_size(b) for b in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for _, n, coll, med, peers, _date in tables:
        cells = []
        for b in sizes:
            k = str(b)
            cells.append(cell(med["tutti"].get(k), {s: med[s][k] for s in peers if k in med[s]}))
        print(f"| {coll}, {n} | " + " | ".join(cells) + " |")
    dates = sorted(t[5] for t in tables if t[5])
    if dates:
        print(f"\n({len(tables)} comparisons, {dates[0]} to {dates[-1]})")


if __name__ == "__main__":
    main()
