#!/usr/bin/env python3
"""Runs tutti-bench under tuttirun and checks its output.

  check_bench.py --tuttirun PATH --bench PATH --coll COLL [--nranks N] [--inplace] [--shared-buffers] --workdir DIR
  check_bench.py --tuttirun PATH --bench PATH --usage-errors --workdir DIR
  check_bench.py --tuttirun PATH --bench PATH --xcopy --workdir DIR

A run must exit 0; every table row must have the 9 columns of nccl-tests
(size, count, type, redop, root, time, algbw, busbw, #wrong) with #wrong 0;
the sizes must be the sweep 8 B .. 64 KiB rounded as the collective
requires; --json must hold one parseable object per row, with every field,
agreeing with the table. --usage-errors checks that bad options and invalid
(dtype, op) pairs exit 2 with a message. --xcopy checks the cross-process
copy lines and fields.
"""
import argparse
import json
import os
import re
import subprocess
import sys

COLLS = ["all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
         "reduce_scatter", "all_to_all", "barrier", "sendrecv"]
BLOCKED = {"all_gather", "gather", "scatter", "reduce_scatter", "all_to_all"}
REDUCING = {"all_reduce", "reduce", "reduce_scatter"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
FIELDS = {"collective", "bytes", "count", "dtype", "op", "root", "world_size",
          "time_us", "algbw", "busbw", "wrong", "inplace"}
MIN_BYTES, MAX_BYTES, ELEM = 8, 64 * 1024, 4  # float32


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def expected_sizes(coll, n):
    if coll == "barrier":
        return [0]
    sizes, s = [], MIN_BYTES
    while s <= MAX_BYTES:
        unit = ELEM * n if coll in BLOCKED else ELEM
        b = s // unit * unit
        if b > 0:
            sizes.append(b)
        s *= 2
    return sizes


def bus_factor(coll, n):
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in BLOCKED:
        return (n - 1) / n
    return 1.0


def run(cmd, timeout=120):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail("timed out: " + " ".join(cmd))


def check_run(args):
    n, coll = args.nranks, args.coll
    tag = coll + ("_inplace" if args.inplace else "") + ("_shared" if args.shared_buffers else "")
    json_path = os.path.join(args.workdir, "bench_%s_n%d.jsonl" % (tag, n))
    if os.path.exists(json_path):
        os.remove(json_path)
    cmd = [args.tuttirun, "-n", str(n), args.bench, coll, "-b", "8", "-e", "64K", "-n", "3", "-w", "1",
           "--json", json_path]
    if args.inplace:
        cmd.append("--inplace")
    if args.shared_buffers:
        cmd.append("--shared-buffers")
    p = run(cmd)
    print(p.stdout)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        fail("%s exited %d" % (" ".join(cmd), p.returncode))

    lines = p.stdout.splitlines()
    header = [l for l in lines if l.startswith("#")]
    if not any(coll in l and ("world size %d" % n) in l for l in header):
        fail("no header naming the collective and the world size")
    if args.shared_buffers and not any("shared buffers" in l for l in header):
        fail("no header saying the buffers are shared")
    rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
    want = expected_sizes(coll, n)
    if len(rows) != len(want):
        fail("%d rows, expected %d (sizes %s)" % (len(rows), len(want), want))
    for row, size in zip(rows, want):
        if len(row) != 9:
            fail("row has %d columns, expected 9: %s" % (len(row), row))
        b, count, dtype, redop, root, t, algbw, busbw, wrong = row
        if int(b) != size:
            fail("row size %s, expected %d" % (b, size))
        if int(count) != size // ELEM:
            fail("row count %s, expected %d" % (count, size // ELEM))
        if dtype != "float32":
            fail("type column %s" % dtype)
        if redop != ("sum" if coll in REDUCING else "none"):
            fail("redop column %s" % redop)
        if int(root) != (0 if coll in ROOTED else -1):
            fail("root column %s" % root)
        if float(t) <= 0:
            fail("time %s is not positive" % t)
        float(algbw), float(busbw)
        if wrong != "0":
            fail("#wrong is %s in row %s" % (wrong, row))

    with open(json_path) as f:
        jlines = [l for l in f.read().splitlines() if l.strip()]
    if len(jlines) != len(rows):
        fail("%d JSON lines for %d rows" % (len(jlines), len(rows)))
    for text, size in zip(jlines, want):
        try:
            obj = json.loads(text)
        except ValueError as e:
            fail("JSON line does not parse (%s): %s" % (e, text))
        fields = FIELDS | ({"shared_buffers"} if args.shared_buffers else set())
        if set(obj) != fields:
            fail("JSON fields %s, expected %s" % (sorted(obj), sorted(fields)))
        if args.shared_buffers and obj["shared_buffers"] is not True:
            fail("JSON row does not say shared_buffers: %s" % text)
        if obj["collective"] != coll or obj["bytes"] != size or obj["count"] != size // ELEM:
            fail("JSON row disagrees with the table: %s" % text)
        if obj["world_size"] != n or obj["dtype"] != "float32" or obj["inplace"] != args.inplace:
            fail("JSON row has wrong world_size/dtype/inplace: %s" % text)
        if obj["wrong"] != 0 or not obj["time_us"] > 0:
            fail("JSON row has wrong != 0 or a non-positive time: %s" % text)
        expect_algbw = size / (obj["time_us"] * 1e3)
        if abs(obj["algbw"] - expect_algbw) > 1e-9 * max(1.0, expect_algbw):
            fail("algbw %g is not bytes / time (%g)" % (obj["algbw"], expect_algbw))
        if abs(obj["busbw"] - obj["algbw"] * bus_factor(coll, n)) > 1e-9 * max(1.0, obj["busbw"]):
            fail("busbw %g is not algbw x %g" % (obj["busbw"], bus_factor(coll, n)))
    print("OK: %s, %d ranks, %d rows" % (tag, n, len(rows)))


def check_xcopy(args):
    """--xcopy on 3 ranks (the third only takes part in the barriers): after
    every row a comment line with the one-way copy and both-ways rates, both
    positive, and busbw / copy and the exchange's share worked out from
    them; the JSON rows carry the two rates."""
    n = 3
    json_path = os.path.join(args.workdir, "bench_xcopy_n%d.jsonl" % n)
    if os.path.exists(json_path):
        os.remove(json_path)
    cmd = [args.tuttirun, "-n", str(n), args.bench, "all_reduce", "-b", "64K", "-e", "1M", "-f", "16", "-n", "3",
           "-w", "1", "--xcopy", "--json", json_path]
    p = run(cmd)
    print(p.stdout)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        fail("%s exited %d" % (" ".join(cmd), p.returncode))
    pattern = re.compile(r"^#   cross-process copy of (\d+) B: ([\d.]+) GB/s; busbw / copy = ([\d.]+); "
                         r"both ways at once: ([\d.]+) GB/s per rank \(([\d.]+) of the copy\)$")
    lines = p.stdout.splitlines()
    rows = [(i, l.split()) for i, l in enumerate(lines) if l.strip() and not l.startswith("#")]
    if [int(r[0]) for _, r in rows] != [64 * 1024, 1024 * 1024]:
        fail("rows %s, expected 64 KiB and 1 MiB" % [r[0] for _, r in rows])
    for i, row in rows:
        m = pattern.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not m:
            fail("no cross-process copy line after row %s" % row)
        size, copy, ratio, exchange, share = int(m[1]), float(m[2]), float(m[3]), float(m[4]), float(m[5])
        if size != int(row[0]) or not copy > 0 or not exchange > 0:
            fail("copy line %r: size must match the row, rates must be positive" % lines[i + 1])
        if abs(ratio - float(row[7]) / copy) > 0.006 + 0.01 * ratio or abs(share - exchange / copy) > 0.006 + 0.01 * share:
            fail("copy line %r: the ratios do not follow from the rates (busbw %s)" % (lines[i + 1], row[7]))
    with open(json_path) as f:
        objs = [json.loads(l) for l in f.read().splitlines() if l.strip()]
    if len(objs) != len(rows) or set(objs[0]) != FIELDS | {"xcopy_gbps", "xexchange_gbps"}:
        fail("JSON rows %s: expected %d with the fields and xcopy_gbps, xexchange_gbps" % (objs, len(rows)))
    if not all(o["xcopy_gbps"] > 0 and o["xexchange_gbps"] > 0 for o in objs):
        fail("JSON copy rates must be positive: %s" % objs)
    print("OK: --xcopy, %d ranks, %d rows" % (n, len(rows)))


def check_usage_errors(args):
    cases = [
        (["all_reduce", "-d", "float32", "-o", "band", "-e", "64"], "band"),  # reported by tutti
        (["all_reduce", "-d", "nosuchtype"], "float32"),  # lists the valid types
        (["all_reduce", "-o", "nosuchop"], "premul_sum"),  # lists the valid ops
        (["nosuchcoll"], "all_reduce"),
        (["all_reduce", "-b", "1M", "-e", "1K"], "-b"),
        (["all_reduce", "-b", "12Q"], "suffix"),
        (["all_to_all", "--inplace"], "in-place"),
    ]
    for extra, needle in cases:
        cmd = [args.tuttirun, "-n", "2", args.bench] + extra
        p = run(cmd, timeout=60)
        if p.returncode != 2:
            fail("%s exited %d, expected 2\n%s" % (" ".join(cmd), p.returncode, p.stderr))
        if needle not in p.stderr:
            fail("%s: stderr does not mention '%s':\n%s" % (" ".join(cmd), needle, p.stderr))
    print("OK: usage errors")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuttirun", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--coll", choices=COLLS)
    ap.add_argument("--nranks", type=int, default=3)
    ap.add_argument("--inplace", action="store_true")
    ap.add_argument("--shared-buffers", action="store_true")
    ap.add_argument("--usage-errors", action="store_true")
    ap.add_argument("--xcopy", action="store_true")
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.usage_errors:
        check_usage_errors(args)
    elif args.xcopy:
        check_xcopy(args)
    elif args.coll:
        check_run(args)
    else:
        ap.error("give --coll, --xcopy or --usage-errors")


if __name__ == "__main__":
    main()
