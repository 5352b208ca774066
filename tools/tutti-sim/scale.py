#!/usr/bin/env python3
"""tutti-sim's predictions at scale: what the table picks, and what is faster.

    tools/tutti-sim/scale.py [--sim build/bin/tutti-sim]
                             [--params tools/tutti-sim/netbed_1gbit.params]
                             [--out docs/perf/sim]

For 64, 256, 1,024, 4,096 and 16,384 ranks, 8 a host, and sizes from 8 B to
64 MiB (powers of two, as tutti-bench counts them: a rank's buffer, or its
block for all_gather and reduce_scatter, its whole send buffer for
all_to_all, of which the table sees the block a peer), runs
`tutti-sim --algo all` for all_reduce, broadcast,
all_gather, reduce_scatter, all_to_all, reduce and barrier: the time of what
the library runs (the table, its timed choices, the two-level forms' own
choices) against every algorithm forced. Where another is at least 10%
faster, the table picks wrongly. The same for the two-level forms' step
across hosts (one rank a host, the table of that communicator).

Writes OUT/scale.md (the findings, the small all_reduce's latency against
log2 p, the large all_reduce's bus bandwidth against p) and the plots
OUT/scale_COLL.png, OUT/all_reduce_latency.png, OUT/all_reduce_busbw.png.
"""
import argparse
import math
import os
import subprocess
import sys

from system_python import need

need("matplotlib", __file__)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RANKS = [64, 256, 1024, 4096, 16384]
PER_HOST = 8
SIZES = [2**k for k in range(3, 27)]
COLLS = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "reduce", "barrier"]
TWO_LEVEL = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"]
# Two-level forms whose step across hosts runs on the L cross communicators
# at once (one a local index), which share each host's link.
CROSS_COPIES = {"all_gather", "reduce_scatter", "all_to_all"}
WRONG = 1.10  # the table's time over the fastest's from which a pick counts as wrong


def human(b):
    for unit, k in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return "%d %s" % (b >> k, unit)
    return "%d B" % b


def human_time(s):
    if s < 1e-3:
        return "%.0f µs" % (s * 1e6)
    if s < 1:
        return "%.1f ms" % (s * 1e3)
    return "%.2f s" % s


def simulate(sim, params, coll, ranks, per_host, sizes, copies=1):
    """{bytes: {"table": (seconds, what), algorithm: seconds}}."""
    if coll == "barrier":
        sizes = [0]
    res = subprocess.run([sim, "--coll", coll, "--ranks", str(ranks), "--per-host", str(per_host),
                          "--copies", str(copies), "--sizes",
                          ",".join(str(s) for s in sizes), "--algo", "all", "--tsv", "--params", params,
                          # Hosts with CPUs of their own, not the test-bed's shared
                          # ones, and plain NICs: no token bucket's credit a round
                          # (burst), which at scale would make rounds of a few KiB
                          # free (a large ring's operation faster than its bytes
                          # take through the link).
                          "--param", "cores=0", "--param", "burst=0"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("tutti-sim failed: " + res.stderr)
    out = {}
    for line in res.stdout.splitlines():
        c, n, per, b, algo, sec, picked, what = line.split("\t")
        row = out.setdefault(int(b), {})
        sec = float(sec)
        if algo == "table":
            row["table"] = (sec, what)
        elif math.isfinite(sec):
            row[algo] = sec
    return out


def sizes_for(coll, ranks):
    # all_to_all: at least one float32 a peer.
    return [s for s in SIZES if coll != "all_to_all" or s >= 4 * ranks]


def findings(data):
    """Size ranges where another algorithm is WRONG times faster than the table's pick."""
    out = []
    for b in sorted(data):
        row = data[b]
        t, what = row["table"]
        algos = {k: v for k, v in row.items() if k != "table"}
        best = min(algos, key=algos.get)
        ratio = t / algos[best]
        if ratio >= WRONG and not what.startswith(best):
            chosen = what.split(" (")[0] if not what.startswith("two_level") else what
            if out and out[-1]["better"] == best and out[-1]["chosen"] == chosen and out[-1]["hi_next"] == b:
                f = out[-1]
                f["hi"], f["hi_next"] = b, b * 2
                f["ratios"].append(ratio)
            else:
                out.append({"lo": b, "hi": b, "hi_next": b * 2, "chosen": chosen, "better": best, "ratios": [ratio]})
    return out


def plot_collective(coll, results, out_dir):
    fig, axes = plt.subplots(1, len(RANKS), figsize=(4 * len(RANKS), 3.6), sharey=False)
    for ax, ranks in zip(axes, RANKS):
        data = results[(coll, ranks)]
        xs = sorted(data)
        algos = sorted({k for b in xs for k in data[b] if k != "table"})
        for a in algos:
            ax.plot([max(x, 1) for x in xs if a in data[x]], [data[x][a] for x in xs if a in data[x]], label=a, lw=1)
        ax.plot([max(x, 1) for x in xs], [data[x]["table"][0] for x in xs], "k:", lw=2, label="table")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("%s, %d ranks" % (coll, ranks), fontsize=9)
        ax.set_xlabel("bytes")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("seconds (model)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "scale_%s.png" % coll), dpi=90)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", default=os.path.join(ROOT, "build", "bin", "tutti-sim"))
    ap.add_argument("--params", default=os.path.join(ROOT, "tools", "tutti-sim", "netbed_1gbit.params"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "perf", "sim"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    results, cross = {}, {}
    for coll in COLLS:
        for ranks in RANKS:
            results[(coll, ranks)] = simulate(a.sim, a.params, coll, ranks, PER_HOST, sizes_for(coll, ranks))
            if coll in TWO_LEVEL:
                hosts = ranks // PER_HOST
                cross[(coll, ranks)] = simulate(a.sim, a.params, coll, hosts, 1, sizes_for(coll, hosts),
                                                PER_HOST if coll in CROSS_COPIES else 1)
        plot_collective(coll, results, a.out)

    md = ["# tutti at scale, as the model predicts it", ""]
    md += [
        "`tools/tutti-sim/scale.py` with `tools/tutti-sim/netbed_1gbit.params`: the network test-bed's",
        "hosts (1 Gbit/s links, the test-bed's latencies) at 64 to 16,384 ranks, %d a host." % PER_HOST,
        "Sizes as tutti-bench counts them: a rank's buffer (all_reduce, broadcast, reduce), its block",
        "(all_gather, reduce_scatter), its whole send buffer (all_to_all; the table's rule is on the",
        "block a peer, this over the rank count). \"table\" is what the library",
        "runs (the table, its timed choices, the two-level forms' own choices); the others are each",
        "algorithm forced (`TUTTI_ALGO`). A pick is wrong where another is at least %d%% faster." %
        round(100 * (WRONG - 1)),
        "all_to_all starts at one float32 a peer (4 × ranks bytes): a range starting there may start lower.",
        "",
        "What these rest on:",
        "",
        "- The test-bed's parameters: 1 Gbit/s links, a round's latency of %.0f µs, %.1f µs of CPU a message,"
        % (1e6 * param_of(a.params, "alpha"), 1e6 * param_of(a.params, "overhead")),
        "  %.0f µs a shared-memory step; each host with CPUs of its own (the test-bed's share 2: `cores`)"
        % (1e6 * param_of(a.params, "shm_alpha")),
        "  and a plain NIC (no token bucket's credit a round: `burst` 0).",
        "  Faster links or CPUs move every crossover; rerun with `--params` of another machine's fit.",
        "- Each time is of one operation alone (`--measure latency`). Back to back, a pipelined chain's",
        "  fill overlaps the operations before it: broadcast's chain then runs at the link's rate from its",
        "  first size (on 4 test-bed hosts, 4.4 ms at 512 KiB against 6.6 for scatter + all_gather).",
        "- A binomial broadcast's rank sends each chunk to all its children at once",
        "  (`broadcast_binomial.cc`), sharing its link: every child hears the chunk when the last does.",
        "- Pairwise all_to_all posts all 2 (p - 1) messages of a rank at once: at thousands of ranks the",
        "  CPU time per message bounds it.",
        "",
        "## Where the table picks wrongly",
        "",
        "| collective | ranks | sizes | table runs | faster | table / faster |",
        "|---|---:|---|---|---|---:|",
    ]
    any_wrong = False
    for coll in COLLS:
        for ranks in RANKS:
            for f in findings(results[(coll, ranks)]):
                any_wrong = True
                md.append("| %s | %d | %s–%s | %s | %s | %.2f–%.2f |" %
                          (coll, ranks, human(f["lo"]), human(f["hi"]), f["chosen"], f["better"], min(f["ratios"]),
                           max(f["ratios"])))
    if not any_wrong:
        md.append("| (none) | | | | | |")
    md += [
        "",
        "## The two-level forms' step across hosts",
        "",
        "The table of the communicator of one rank a host (ranks = hosts), which the two-level forms",
        "use across hosts; for all_gather, reduce_scatter and all_to_all as %d such communicators at" % PER_HOST,
        "once (one a local index: `--copies %d`), sharing each host's link. Sizes as tutti-bench counts" % PER_HOST,
        "them for that communicator (all_to_all: a cross rank's whole send buffer, %d of the two-level" % PER_HOST,
        "form's blocks a peer host).",
        "",
        "| collective | hosts | sizes | table runs | faster | table / faster |",
        "|---|---:|---|---|---|---:|",
    ]
    any_wrong = False
    for coll in TWO_LEVEL:
        for ranks in RANKS:
            for f in findings(cross[(coll, ranks)]):
                any_wrong = True
                md.append("| %s | %d | %s–%s | %s | %s | %.2f–%.2f |" %
                          (coll, ranks // PER_HOST, human(f["lo"]), human(f["hi"]), f["chosen"], f["better"],
                           min(f["ratios"]), max(f["ratios"])))
    if not any_wrong:
        md.append("| (none) | | | | | |")

    # Small all_reduce latency against log2 p; large all_reduce bus bandwidth against p.
    ps = [2**k for k in range(4, 15)]
    lat, bw = {}, {}
    for p in ps:
        d = simulate(a.sim, a.params, "all_reduce", p, PER_HOST, [8, 64 << 20])
        lat[p] = (d[8]["table"][0], d[8]["table"][1], d[8].get("recursive_doubling"))
        t, what = d[64 << 20]["table"]
        busbw = lambda s: 2 * (p - 1) / p * (64 << 20) / s / 1e9  # noqa: E731
        bw[p] = (busbw(t), what, busbw(d[64 << 20]["ring"]), busbw(d[64 << 20]["rabenseifner"]))
    md += [
        "",
        "## Small all_reduce: latency against log2 p (8 B)",
        "",
        "| ranks | log2 p | table runs | time | per log2 p | flat recursive doubling |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for p in ps:
        t, what, flat = lat[p]
        md.append("| %d | %d | %s | %s | %s | %s |" % (p, int(math.log2(p)), what, human_time(t),
                                                       human_time(t / math.log2(p)), human_time(flat)))
    md += [
        "",
        "## Large all_reduce: bus bandwidth against p (64 MiB)",
        "",
        "busbw = 2 (p - 1) / p × bytes / time; the link's rate is %.3f GB/s a direction." % (1e-9 / beta_of(a.params)),
        "",
        "| ranks | table runs | busbw GB/s | flat ring | flat Rabenseifner |",
        "|---:|---|---:|---:|---:|",
    ]
    for p in ps:
        b, what, ring, rab = bw[p]
        md.append("| %d | %s | %.4f | %.4f | %.4f |" % (p, what, b, ring, rab))
    md += ["", "Plots: `scale_COLL.png` (every algorithm's time against size, one panel per rank count),",
           "`all_reduce_latency.png`, `all_reduce_busbw.png`.", ""]
    with open(os.path.join(a.out, "scale.md"), "w") as f:
        f.write("\n".join(md))

    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot([math.log2(p) for p in ps], [lat[p][0] * 1e6 for p in ps], "o-", label="table")
    ax.plot([math.log2(p) for p in ps], [lat[p][2] * 1e6 for p in ps], "s--", label="flat recursive_doubling")
    ax.set_xlabel("log2 ranks (%d a host)" % PER_HOST)
    ax.set_ylabel("µs (model)")
    ax.set_title("all_reduce, 8 B")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "all_reduce_latency.png"), dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(ps, [bw[p][0] for p in ps], "o-", label="table")
    ax.plot(ps, [bw[p][2] for p in ps], "s--", label="flat ring")
    ax.plot(ps, [bw[p][3] for p in ps], "^--", label="flat rabenseifner")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks (%d a host)" % PER_HOST)
    ax.set_ylabel("busbw GB/s (model)")
    ax.set_title("all_reduce, 64 MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "all_reduce_busbw.png"), dpi=90)
    plt.close(fig)
    print(open(os.path.join(a.out, "scale.md")).read())


def param_of(params, name):
    with open(params) as f:
        for line in f:
            line = line.split("#")[0]
            if "=" in line and line.split("=")[0].strip() == name:
                return float(line.split("=")[1])
    return float("nan")


def beta_of(params):
    return param_of(params, "beta")


if __name__ == "__main__":
    main()
