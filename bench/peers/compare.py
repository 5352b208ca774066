#!/usr/bin/python3
"""compare.py: tutti and its peers side by side, on this machine, one collective.

  python3 bench/peers/compare.py COLL N [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP]
                                 [--tiers MAXBYTES:ITERS,...]
                                 [-o OP] [-r ROOT] [--reps R] [--no-direct-check]
                                 [--systems tutti,openmpi,mpich,gloo,torch-gloo,torch-tutti] [--out DIR]

Runs every system R times (default 3), alternating systems within each
repetition and rotating their order from one repetition to the next
(tutti, openmpi, mpich; openmpi, mpich, tutti; mpich, tutti, openmpi; ...)
so that slow drifts of the machine, and whatever one system leaves behind
for the next, hit them all alike. Each run is a
tutti-bench-style sweep (same sizes, timing rule and bus-bandwidth factors)
writing JSON lines; per size the median time over the repetitions is kept.
With --tiers (e.g. 8K:2000,512K:200), the sizes up to each bound run in a
sweep of their own with that many timed iterations (and a tenth as many
warm-up ones, at least -w), the sizes above the last bound with -n: small
operations get more iterations, as in the OSU micro-benchmarks. An operation
of a microsecond timed over 20 iterations measures the scheduler more than
the operation.

Prints one table (size; per system time in us and busbw in GB/s; tutti's
ratio best_peer_time / tutti_time, > 1 meaning tutti is faster; how many
runs each median holds) and flags rows with wrong elements. A system whose
median holds fewer runs than R at a size (a run failed or stopped early)
shows its time with "(k/R)".

Direct check (unless --no-direct-check): after the alternating runs, every
peer runs once more on its own, after a pause, for the sizes from 1 MiB up.
Where that direct run's time differs from the peer's median by more than
20%, the peer's row is marked "unverified" and no ratio against it is
published for that size: a ratio a direct run of the peer does not
reproduce is not a result. Writes into DIR (default build/peers/results):
  COLL_nN.md         the table in Markdown, with the machine, the date and the commands
  COLL_nN.png        busbw vs size and latency vs size, log-log, one line per system
  COLL_nN.json       everything: commands, exit codes, every row of every run, medians
  raw/COLL_nN_SYSTEM_repK.jsonl / .log   each run's JSON lines and output

Needs: build/bin/tuttirun and build/bin/tutti-bench (cmake --build build
--target tutti-bench tuttirun), the peers (bench/peers/setup.sh; compare.py
runs bench/peers/build.sh itself), and matplotlib for the plot (if
the python3 running this lacks it, compare.py re-executes itself with
Debian's /usr/bin/python3; torch's systems run with the project's .venv).
Exit status: 0 when every run that could run did and no row was wrong,
1 otherwise, 2 bad options.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PY = "/usr/bin/python3"  # Debian's python, the one python3-matplotlib is for
# torch 2.13 and the torch backend: the project's venv (scripts/python_env.sh).
TORCH_PY = os.path.join(os.environ.get("TUTTI_VENV") or os.path.join(ROOT, ".venv"), "bin", "python")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PY) and os.path.exists(SYSTEM_PY) \
            and "COMPARE_REEXEC" not in os.environ:
        os.environ["COMPARE_REEXEC"] = "1"
        os.execv(SYSTEM_PY, [SYSTEM_PY, os.path.abspath(__file__)] + sys.argv[1:])


ensure_matplotlib()

ALL_SYSTEMS = ["tutti", "openmpi", "mpich", "gloo", "torch-gloo", "torch-tutti"]
EXIT_NOT_AVAILABLE = 3
COLLS = ["all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter", "all_to_all",
         "barrier", "sendrecv"]

# Loopback-only, run-as-root settings of each MPI (what works here; see README.md).
# Open MPI 4.1: mpirun refuses to run as root without --allow-run-as-root and
# more ranks than cores without --oversubscribe; data through shared memory
# only (btl self,vader: no TCP BTL probing eth0), mpirun's control channel on
# lo. vader's single-copy mechanism stays the default (CMA, process_vm_readv),
# which works here; where a container forbids it, add
# OMPI_MCA_btl_vader_single_copy_mechanism=none.
# Placement: every system runs with the one tuttirun uses by default (each
# rank an even share of the CPUs, round robin one CPU each when ranks
# outnumber them): Open MPI with --bind-to core:overload-allowed, MPICH with
# -bind-to core (both place rank i on CPU i % cores here), Gloo and torch's
# gloo through PEERS_BIND_CORES=1, which their benchmarks read.
OPENMPI_ENV = {
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}
# MPICH 4.0 (hydra): ranks forked locally (-launcher fork: no ssh);
# intra-node data goes through MPICH's shared memory. Running as root needs nothing.
MPICH_ENV = {}


def parse_size(text):
    t = text.strip()
    shift = {"k": 10, "m": 20, "g": 30}.get(t[-1:].lower(), 0)
    if shift:
        t = t[:-1]
    if not t.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a size")
    return int(t) << shift


def parse_args():
    p = argparse.ArgumentParser(prog="compare.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("coll", metavar="COLL", choices=COLLS)
    p.add_argument("n", metavar="N", type=int, help="number of ranks")
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--tiers", default="",
                   help="MAXBYTES:ITERS,...: timed iterations for the sizes up to each bound (default: -n for all)")
    p.add_argument("-o", "--op", default="sum", choices=["sum", "product", "min", "max"])
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    p.add_argument("--out", default=os.path.join(ROOT, "build", "peers", "results"))
    p.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    p.add_argument("--no-direct-check", dest="direct_check", action="store_false",
                   help="skip the direct runs of the peers from 1 MiB up")
    p.add_argument("--build", action="append", default=[], metavar="NAME=DIR",
                   help="another build of tutti (DIR holds bin/tuttirun and bin/tutti-bench), run as the "
                   "system tutti-NAME and compared as a peer: a change's before and after")
    a = p.parse_args()
    a.builds = {}
    for spec in a.build:
        name, _, d = spec.partition("=")
        if not name or not d or not name.replace("_", "").isalnum():
            p.error(f"--build {spec}: expected NAME=DIR, NAME letters, digits and _")
        if not os.path.isfile(os.path.join(d, "bin", "tutti-bench")):
            p.error(f"--build {spec}: no bin/tutti-bench in {d}")
        a.builds["tutti-" + name] = os.path.abspath(d)
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in a.systems:
        if s not in ALL_SYSTEMS and s not in a.builds:
            p.error(f"unknown system '{s}' (known: {', '.join(ALL_SYSTEMS + list(a.builds))})")
    if not a.systems:
        p.error("--systems is empty")
    if a.n < 1 or a.reps < 1:
        p.error("N and --reps must be at least 1")
    for t in (a.minbytes, a.maxbytes):
        parse_size(t)
    if a.stepfactor < 2:
        p.error("-f must be at least 2")
    try:
        a.tiers = [(parse_size(b), int(i)) for b, _, i in (t.partition(":") for t in a.tiers.split(",") if t)]
    except (ValueError, argparse.ArgumentTypeError):
        p.error(f"--tiers: expected MAXBYTES:ITERS,..., got '{a.tiers}'")
    if any(i < 1 for _, i in a.tiers) or [b for b, _ in a.tiers] != sorted({b for b, _ in a.tiers}):
        p.error("--tiers: bounds must increase and iterations be at least 1")
    return a


def sweeps(a):
    """[(minbytes, maxbytes, iters, warmup)]: the sizes of the sweep, cut by --tiers."""
    lo, hi = parse_size(a.minbytes), parse_size(a.maxbytes)
    sizes = []
    b = lo
    while b <= hi:
        sizes.append(b)
        b = b * a.stepfactor if b else 1
    if not a.tiers or a.coll == "barrier" or not sizes:
        return [(a.minbytes, a.maxbytes, a.iters, a.warmup)]
    out = []
    for bound, iters in a.tiers + [(None, a.iters)]:
        part = [s for s in sizes if bound is None or s <= bound]
        sizes = sizes[len(part):]
        if part:
            warm = a.warmup if bound is None else max(a.warmup, iters // 10)
            out.append((str(part[0]), str(part[-1]), iters, warm))
    return out


def bench_args(a, json_path, sweep):
    lo, hi, iters, warmup = sweep
    return [a.coll, "-b", lo, "-e", hi, "-f", str(a.stepfactor), "-n", str(iters),
            "-w", str(warmup), "-c", "1", "-d", "float32", "-o", a.op, "-r", str(a.root), "--json", json_path]


def command(system, a, json_path, sweep):
    """(argv, extra environment) of one run."""
    b = os.path.join(ROOT, "build")
    args = bench_args(a, json_path, sweep)
    if system == "tutti" or system in a.builds:
        b = a.builds.get(system, b)
        return [os.path.join(b, "bin", "tuttirun"), "-n", str(a.n), os.path.join(b, "bin", "tutti-bench")] + args, {}
    if system == "openmpi":
        return (["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--bind-to", "core:overload-allowed", "-np", str(a.n),
                 os.path.join(b, "peers", "mpi_bench_openmpi")] + args, OPENMPI_ENV)
    if system == "mpich":
        return (["mpiexec.mpich", "-launcher", "fork", "-bind-to", "core", "-np", str(a.n),
                 os.path.join(b, "peers", "mpi_bench_mpich")] + args, MPICH_ENV)
    if system == "gloo":
        return [os.path.join(b, "peers", "gloo_bench"), "--np", str(a.n)] + args, {"PEERS_BIND_CORES": "1"}
    if system == "torch-gloo":
        return ([TORCH_PY, os.path.join(HERE, "torch_bench.py"), "--np", str(a.n)] + args,
                {"GLOO_SOCKET_IFNAME": "lo", "PEERS_BIND_CORES": "1"})
    if system == "torch-tutti":  # tutti as a torch.distributed backend (build/python)
        return ([TORCH_PY, os.path.join(HERE, "torch_bench.py"), "--np", str(a.n), "--backend", "tutti"] + args,
                {"GLOO_SOCKET_IFNAME": "lo", "PEERS_BIND_CORES": "1"})
    raise ValueError(system)


def shell_line(argv, env):
    q = lambda s: s if s and all(c.isalnum() or c in "-_./,=:" for c in s) else "'" + s.replace("'", "'\\''") + "'"
    return " ".join([f"{k}={q(v)}" for k, v in env.items()] + [q(x) for x in argv])


def machine():
    model, cores = "unknown CPU", f"{os.cpu_count()} CPUs"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        info = {}
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
        model = info.get("Model name", model)
        cores = info.get("CPU(s)") or str(os.cpu_count())
        tpc = info.get("Thread(s) per core")
        cores = f"{cores} CPUs" + (f" ({tpc} thread(s) per core)" if tpc else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return model, cores


def fmt_size(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def run_one(system, a, rep, raw):
    """Every sweep of one system's repetition, as one run."""
    parts = [run_sweep(system, a, rep, raw, i, sw) for i, sw in enumerate(sweeps(a))]
    worst = next((p for p in parts if p["exit"] != 0), parts[0])
    return {"system": system, "rep": rep, "command": " ; ".join(p["command"] for p in parts), "exit": worst["exit"],
            "status": worst["status"], "rows": [row for p in parts for row in p["rows"]],
            "log": " ".join(p["log"] for p in parts), "json": " ".join(p["json"] for p in parts),
            "faults": [p["faults"] for p in parts], "sweeps": [p["sweep"] for p in parts]}


def label(system):
    """A system's column name; Gloo's say that they go over TCP loopback (Gloo
    has no shared-memory transport), while tutti uses shared memory on one host."""
    return f"{system} (TCP loopback)" if system in ("gloo", "torch-gloo") else system


DIRECT_MIN_BYTES = 1 << 20
DIRECT_TOLERANCE = 0.20
DIRECT_PAUSE_S = 3


def fault_notes(a, runs):
    """One line: each system's page faults in the run of the largest sizes,
    per operation (median over the repetitions)."""
    per = {}
    for r in runs:
        if not r.get("faults") or not r.get("sweeps"):
            continue
        lo, hi, iters, warm = r["sweeps"][-1]
        sizes = max(1, len([row for row in r["rows"] if parse_size(lo) <= row["bytes"] <= parse_size(hi)]))
        per.setdefault(r["system"], []).append(r["faults"][-1] / (sizes * (iters + warm + 1)))
    if not per:
        return []
    lo, hi = runs[0]["sweeps"][-1][:2]
    return [f"page faults per operation from {fmt_size(parse_size(lo))} to {fmt_size(parse_size(hi))} (whole process tree, start-up and "
            "first touch of the buffers included; median over the repetitions): " + ", ".join(f"{s} {statistics.median(v):,.0f}" for s, v in per.items())]


def direct_notes(a, med, direct, unverified):
    """Lines saying what the direct check found."""
    if not direct:
        return []
    out = []
    for s, rows in direct.items():
        ratios = [rows[b] / med[s][b]["time_us"] for b in rows if b in med[s] and med[s][b]["time_us"] > 0]
        if ratios:
            out.append(f"direct check, {s} alone from {fmt_size(DIRECT_MIN_BYTES)}: direct/median "
                       f"{min(ratios):.2f}-{max(ratios):.2f}")
    for b, bad in sorted(unverified.items()):
        out.append(f"unverified at {fmt_size(b)}: " + ", ".join(
            f"{s} direct/median {r:.2f}" if r else f"{s} no direct figure" for s, r in bad)
            + f" (beyond {DIRECT_TOLERANCE:.0%}): no ratio against it")
    return out


def run_sweep(system, a, rep, raw, index, sweep, direct=False):
    tag = f"{a.coll}_n{a.n}_{system}_" + ("direct" if direct else f"rep{rep}") + (f"_part{index}" if index else "")
    json_path = os.path.join(raw, tag + ".jsonl")
    log_path = os.path.join(raw, tag + ".log")
    if os.path.exists(json_path):
        os.remove(json_path)
    argv, extra = command(system, a, json_path, sweep)
    env = dict(os.environ, **extra)
    line = shell_line(argv, extra)
    print(f"[{'direct' if direct else f'rep {rep + 1}/{a.reps}'}] {system}: {line}", flush=True)
    # Page faults of the run's whole process tree (every process is waited
    # for by its parent): a system that faults in fresh memory at every
    # operation shows it here, and pays whatever the machine charges for it.
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=a.timeout, cwd=ROOT)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
        out += f"\ncompare.py: timed out after {a.timeout} s\n"
    except OSError as e:
        rc, out = 127, f"compare.py: cannot run {argv[0]}: {e}\n"
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    faults = (ru1.ru_minflt - ru0.ru_minflt) + (ru1.ru_majflt - ru0.ru_majflt)
    with open(log_path, "w") as f:
        f.write(f"$ {line}\n{out}\ncompare.py: {faults} page faults in the run's processes\n")
    rows = []
    if os.path.exists(json_path):
        with open(json_path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    status = "ok"
    if rc == EXIT_NOT_AVAILABLE and not rows:
        status = "not available"
        why = [l for l in out.splitlines() if "not available" in l]
        print(f"    {system}: {a.coll} not available" + (f" ({why[0].lstrip('# ')})" if why else ""), flush=True)
    elif rc != 0:
        status = f"exit {rc}"
        tail = "\n".join("    | " + l for l in out.rstrip().splitlines()[-8:])
        print(f"    {system}: exit status {rc}; output tail ({log_path}):\n{tail}", flush=True)
    return {"system": system, "rep": rep, "command": line, "exit": rc, "status": status, "rows": rows,
            "log": log_path, "json": json_path, "faults": faults, "sweep": sweep}


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    raw = os.path.join(a.out, "raw")
    os.makedirs(raw, exist_ok=True)

    # Binaries.
    missing = [p for p in ("tuttirun", "tutti-bench") if not os.path.exists(os.path.join(ROOT, "build", "bin", p))]
    if "tutti" in a.systems and missing:
        print(f"compare.py: build/bin/{missing[0]} is missing; build it with: "
              "cmake --build build --target tutti-bench tuttirun", file=sys.stderr)
        return 2
    if any(s in a.systems for s in ("openmpi", "mpich", "gloo")):
        need = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich", "gloo": "g++"}
        absent = [need[s] for s in a.systems if s in need and shutil.which(need[s]) is None]
        if absent:
            print(f"compare.py: {', '.join(absent)} not found: run bench/peers/setup.sh", file=sys.stderr)
            return 2
        r = subprocess.run(["bash", os.path.join(HERE, "build.sh")], cwd=ROOT)
        if r.returncode != 0:
            print("compare.py: bench/peers/build.sh failed", file=sys.stderr)
            return 1

    # Runs, alternating systems within each repetition, in rotating order.
    runs = []
    for rep in range(a.reps):
        k = rep % len(a.systems)
        for s in a.systems[k:] + a.systems[:k]:
            runs.append(run_one(s, a, rep, raw))

    # Medians per system and size.
    med = {}  # system -> bytes -> dict
    status = {}
    for s in a.systems:
        mine = [r for r in runs if r["system"] == s]
        status[s] = sorted({r["status"] for r in mine})
        by = {}
        for r in mine:
            for row in r["rows"]:
                by.setdefault(row["bytes"], []).append(row)
        med[s] = {}
        for b, rows in by.items():
            t = statistics.median(x["time_us"] for x in rows)
            factor = rows[0]["busbw"] / rows[0]["algbw"] if rows[0]["algbw"] else 1.0
            algbw = b / (t * 1e3) if t > 0 else 0.0
            wrong = [x["wrong"] for x in rows if x.get("wrong") is not None]
            med[s][b] = {"time_us": t, "algbw": algbw, "busbw": algbw * factor, "reps": len(rows),
                         "wrong": sum(wrong) if wrong else None, "times": [x["time_us"] for x in rows]}
    sizes = sorted({b for s in a.systems for b in med[s]})
    # tutti's peers; torch-tutti is tutti itself (through torch.distributed),
    # compared with torch-gloo in a column of its own.
    peers = [s for s in a.systems if s not in ("tutti", "torch-tutti")]
    torch_pair = "torch-tutti" in a.systems and "torch-gloo" in a.systems

    # Direct check: each peer alone, after a pause, from 1 MiB up.
    direct = {}  # system -> bytes -> time_us of the direct run
    unverified = {}  # bytes -> [(system, direct/median)]
    big = [b for b in sizes if b >= DIRECT_MIN_BYTES]
    if a.direct_check and big and a.coll != "barrier":
        for s in peers:
            if not any(b in med[s] for b in big):
                continue
            time.sleep(DIRECT_PAUSE_S)
            r = run_sweep(s, a, a.reps, raw, 0, (str(big[0]), a.maxbytes, a.iters, a.warmup), direct=True)
            runs.append(r)
            direct[s] = {row["bytes"]: row["time_us"] for row in r["rows"]}
            for b in big:
                if b not in med[s]:
                    continue
                d = direct[s].get(b)
                ratio = d / med[s][b]["time_us"] if d and med[s][b]["time_us"] > 0 else None
                med[s][b]["direct_us"] = d
                if ratio is None or abs(ratio - 1) > DIRECT_TOLERANCE:
                    unverified.setdefault(b, []).append((s, ratio))

    # The table.
    head = ["size"]
    for s in a.systems:
        head += [f"{label(s)} us", f"{label(s)} GB/s"]
    if "tutti" in a.systems and peers:
        head += ["best peer", "tutti ratio"]
    if torch_pair:
        head.append("torch ratio")
    head += ["runs", "wrong"]
    body = []
    any_wrong = False
    for b in sizes:
        row = [fmt_size(b) if a.coll != "barrier" else "0"]
        bad_peers = {s for s, _ in unverified.get(b, [])}
        for s in a.systems:
            m = med[s].get(b)
            if not m:
                row += ["-", "-"]
                continue
            mark = "" if m["reps"] >= a.reps else f" ({m['reps']}/{a.reps})"
            mark += " unverified" if s in bad_peers else ""
            row += [f"{m['time_us']:.2f}{mark}", f"{m['busbw']:.3f}"]
        if "tutti" in a.systems and peers:
            # Only peers whose figure a direct run reproduced count.
            cand = [(med[s][b]["time_us"], s) for s in peers if b in med[s] and s not in bad_peers]
            if cand and b in med["tutti"] and med["tutti"][b]["time_us"] > 0:
                best_t, best_s = min(cand)
                row += [best_s, f"{best_t / med['tutti'][b]['time_us']:.3g}"]
            else:
                row += ["-", "-"]
        if torch_pair:
            tt, tg = med["torch-tutti"].get(b), med["torch-gloo"].get(b)
            row.append(f"{tg['time_us'] / tt['time_us']:.3g}" if tt and tg and tt["time_us"] > 0 else "-")
        counts = {s: med[s][b]["reps"] for s in a.systems if b in med[s]}
        row.append(str(a.reps) if counts and all(c >= a.reps for c in counts.values()) and len(counts) == len(a.systems)
                   else ", ".join(f"{s} {counts.get(s, 0)}" for s in a.systems))
        bad = [f"{s}:{med[s][b]['wrong']}" for s in a.systems if b in med[s] and (med[s][b]["wrong"] or 0) > 0]
        any_wrong |= bool(bad)
        row.append("WRONG " + " ".join(bad) if bad else "0")
        body.append(row)

    widths = [max(len(head[i]), *(len(r[i]) for r in body)) if body else len(head[i]) for i in range(len(head))]
    title = (f"{a.coll}, {a.n} ranks, float32" + (f", op {a.op}" if a.coll in ("all_reduce", "reduce",
                                                                             "reduce_scatter") else "")
             + (f", root {a.root}" if a.coll in ("broadcast", "reduce", "gather", "scatter") else "")
             + ", " + ", ".join(f"iters {sw[2]}, warmup {sw[3]}"
                                + (f" ({fmt_size(parse_size(sw[0]))}-{fmt_size(parse_size(sw[1]))})"
                                   if len(sweeps(a)) > 1 else "") for sw in sweeps(a))
             + f", median of {a.reps} rep(s)")
    print()
    print("# " + title)
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in body:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    for s in a.systems:
        if status[s] != ["ok"]:
            print(f"# {s}: {', '.join(status[s])}")
    if "tutti" in a.systems and peers:
        print("# tutti ratio = best peer time / tutti time (> 1: tutti faster)")
    if torch_pair:
        print("# torch ratio = torch-gloo time / torch-tutti time (> 1: backend tutti faster)")
    if any_wrong:
        print("# WRONG: some rows had wrong elements (see the logs in " + raw + ")")
    notes = direct_notes(a, med, direct, unverified) + fault_notes(a, runs)
    for n in notes:
        print("# " + n)

    # Markdown.
    model, cores = machine()
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    base = os.path.join(a.out, f"{a.coll}_n{a.n}")
    with open(base + ".md", "w") as f:
        f.write(f"# {a.coll}, {a.n} ranks: tutti and peers\n\n")
        f.write(f"- machine: {model}, {cores}\n- date: {now}\n- {title}\n")
        f.write(f"- command: `python3 bench/peers/compare.py {' '.join(sys.argv[1:])}`\n")
        if any(x in a.systems for x in ("gloo", "torch-gloo")):
            f.write("- gloo and torch-gloo run over TCP loopback (Gloo has no shared-memory transport); "
                    "tutti runs over shared memory\n")
        f.write("- time: per-op time of the slowest rank (us); busbw: GB/s with nccl-tests' factors; "
                "tutti ratio = best peer time / tutti time (> 1: tutti faster)"
                + ("; torch ratio = torch-gloo time / torch-tutti time" if torch_pair else "") + "\n\n")
        f.write("| " + " | ".join(head) + " |\n")
        f.write("|" + "|".join("---:" for _ in head) + "|\n")
        for r in body:
            f.write("| " + " | ".join(r) + " |\n")
        f.write("\n")
        for s in a.systems:
            if status[s] != ["ok"]:
                f.write(f"- {s}: {', '.join(status[s])}\n")
        for n in notes:
            f.write(f"- {n}\n")
        f.write("\nLaunch commands (first repetition):\n\n```sh\n")
        for r in runs:
            if r["rep"] == 0:
                f.write(r["command"] + "\n")
        f.write("```\n")

    # Raw JSON.
    with open(base + ".json", "w") as f:
        json.dump({"collective": a.coll, "world_size": a.n, "args": vars(a), "machine": {"model": model,
                   "cpus": cores}, "date": now, "runs": runs,
                   "median": {s: {str(b): v for b, v in med[s].items()} for s in a.systems}}, f, indent=1)

    # Plot.
    from plot import plot_bw_latency
    png = base + ".png"
    if not plot_bw_latency(png, f"{title}\n{model}, {cores}, {now}",
                           {s: {b: (v["time_us"], v["busbw"]) for b, v in med[s].items()} for s in a.systems}):
        png = None
        print("compare.py: matplotlib is missing: no plot (bench/peers/setup.sh installs it)", file=sys.stderr)

    print(f"\nwrote {base}.md, {base}.json" + (f", {png}" if png else "") + f", raw runs in {raw}/")
    failed = any(r["status"] not in ("ok", "not available") for r in runs)
    return 1 if failed or any_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
