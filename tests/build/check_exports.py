#!/usr/bin/python3
"""libtutti.so exports the API of include/tutti and nothing else: every
defined dynamic symbol is in namespace tutti (or its typeinfo or vtable),
none is in tutti::detail, and the API's entry points are there.

  check_exports.py LIBTUTTI_SO
"""
import subprocess
import sys

lib = sys.argv[1]
out = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], check=True, capture_output=True, text=True).stdout
names = []
for line in out.splitlines():
    parts = line.split(" ", 2)
    if len(parts) == 3:
        names.append(parts[2])
allowed = ("tutti::", "typeinfo for tutti::", "typeinfo name for tutti::", "vtable for tutti::")
bad = [n for n in names if not n.startswith(allowed) and not n.startswith("TUTTI_")]  # version node
hidden = [n for n in names if "tutti::detail::" in n or "Impl" in n]
for want in ("tutti::init()", "tutti::Communicator::all_reduce(", "tutti::Work::wait() const", "typeinfo for tutti::Error",
             "tutti::make_tcp_store_client(", "tutti::version()"):
    if not any(n.startswith(want) for n in names):
        bad.append(f"missing: {want}")
if bad or hidden:
    print(f"{lib}: {len(bad) + len(hidden)} unexpected exports (of {len(names)}):")
    for n in (bad + hidden)[:40]:
        print("  " + n)
    sys.exit(1)
print(f"{lib}: {len(names)} exports, all of the API")
