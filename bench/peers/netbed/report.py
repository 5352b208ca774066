#!/usr/bin/env python3
"""Tables and plots from bench/peers/netbed/compare.sh runs.

    report.py OUT_BASE TITLE COLL RANKS RAW [RAW ...]

RAW files hold compare.sh's output ("== SYSTEM rep N" lines, then one
"size time_us algbw busbw wrong" row per size). Several files (e.g. small
sizes with many iterations and large ones with few) are merged by size.
Writes OUT_BASE.md (per size: every run's time, the medians, each tutti
variant's ratio to Open MPI = Open MPI's median time / the variant's, and
the median busbw, worked out from the time with nccl-tests' factor for COLL
on RANKS ranks) and OUT_BASE.png (busbw and time against size, log
scales, one line per system). A row whose check failed (wrong > 0) is kept
in the table and marks the command as failed.
"""
import datetime
import os
import re
import statistics
import sys

SYSTEM_PY = "/usr/bin/python3"  # Debian's python, the one python3-matplotlib is for


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    base, title, coll, n, raws = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1, "reduce": 1, "sendrecv": 1}.get(coll, (n - 1) / n)
    runs = {}  # system -> size -> [(time_us, busbw)]
    systems = []
    wrong = 0
    for raw in raws:
        cur = None
        for line in open(raw):
            m = re.match(r"== (\S+) rep \d+", line)
            if m:
                cur = m.group(1)
                if cur not in systems:
                    systems.append(cur)
                continue
            f = line.split()
            if cur and len(f) >= 5 and f[0].isdigit():
                size, t = int(f[0]), float(f[1])
                runs.setdefault(cur, {}).setdefault(size, []).append((t, factor * size / (t * 1e3) if t else 0.0))
                wrong += int(float(f[4])) > 0
    if "openmpi" not in systems:
        sys.exit("report.py: no Open MPI runs in " + ", ".join(raws))
    systems = [s for s in systems if s != "openmpi"] + ["openmpi"]  # Open MPI last
    sizes = sorted({b for s in runs.values() for b in s})
    med = {s: {b: (statistics.median(t for t, _ in v), statistics.median(w for _, w in v))
               for b, v in runs.get(s, {}).items()} for s in systems}
    ours = [s for s in systems if s != "openmpi"]
    variants = [s for s in ours if s != "tutti"] if "tutti" in ours else []

    def fmt(x):
        return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"

    now = datetime.date.today().isoformat()
    cpus = os.cpu_count()
    lines = [f"# {title}", "",
             f"{now}, {cpus} CPUs shared by every test-bed host. Time per operation in µs (each run, then the "
             "median); ratio = Open MPI's median time / the system's (above 1: faster than Open MPI); "
             "tutti/X = X's median time / tutti's (variants run with settings of their own); busbw in GB/s "
             "(median).", ""]
    head = "| size |" + "".join(f" {s} runs | {s} |" for s in systems) + "".join(f" {s} ratio |" for s in ours) \
        + "".join(f" tutti/{s} |" for s in variants) + "".join(f" {s} busbw |" for s in systems)
    lines += [head, "|" + "---:|" * (head.count("|") - 1)]
    for b in sizes:
        row = f"| {b} |"
        for s in systems:
            v = runs.get(s, {}).get(b, [])
            row += " " + ", ".join(fmt(t) for t, _ in v) + " | " + (fmt(med[s][b][0]) if v else "–") + " |"
        for s in ours:
            ok = b in med[s] and b in med["openmpi"]
            row += f" {med['openmpi'][b][0] / med[s][b][0]:.2f} |" if ok else " – |"
        for s in variants:
            ok = b in med[s] and b in med["tutti"]
            row += f" {med[s][b][0] / med['tutti'][b][0]:.2f} |" if ok else " – |"
        for s in systems:
            row += f" {med[s][b][1]:.4g} |" if b in med[s] else " – |"
        lines.append(row)
    lines += ["", "Raw runs: " + ", ".join(os.path.basename(r) for r in raws)]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.path.exists(SYSTEM_PY) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PY) \
                and "REPORT_REEXEC" not in os.environ:
            os.environ["REPORT_REEXEC"] = "1"
            os.execv(SYSTEM_PY, [SYSTEM_PY, os.path.abspath(__file__)] + sys.argv[1:])
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from plot import plot_bw_latency
    if plot_bw_latency(base + ".png", f"{title}\n{now}, {cpus} CPUs", {s: med[s] for s in systems}):
        print(f"wrote {base}.md, {base}.png")
    else:
        print("report.py: matplotlib is missing: no plot (bench/peers/setup.sh installs it)", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
