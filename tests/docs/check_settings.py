#!/usr/bin/python3
"""The settings table (src/common/settings.cc) is the only declaration of the
TUTTI_* settings:

- docs/configuration.md's table is exactly what `tutti-config --markdown`
  prints (between its two marker lines), and docs/algorithms.md's what
  `tutti-config --algorithms` prints from the registry of algorithms;
- every "TUTTI_..." name the library, the tools and the Python package use is
  in the table;
- in the library only common/settings.cc calls getenv.

  check_settings.py TUTTI_CONFIG SOURCE_DIR [--write]

--write rewrites both tables from the program instead.
"""
import re
import subprocess
import sys

tool, root = sys.argv[1], sys.argv[2]
write = "--write" in sys.argv[3:]
END = "<!-- End of the generated table. -->"


def check_table(doc_rel, flag):
    """docs/<doc_rel>'s generated table is what `tutti-config <flag>` prints."""
    begin = f"<!-- The table below is generated: build/bin/tutti-config {flag} (tests/docs/check_settings.py --write). -->"
    table = subprocess.run([tool, flag], check=True, capture_output=True, text=True).stdout
    doc_path = f"{root}/docs/{doc_rel}"
    doc = open(doc_path).read()
    if begin not in doc or END not in doc:
        failures.append(f"{doc_path}: the marker lines of the generated table are missing")
        return
    head, rest = doc.split(begin, 1)
    current, tail = rest.split(END, 1)
    if write:
        open(doc_path, "w").write(head + begin + "\n" + table + END + tail)
    elif current.strip("\n") != table.strip("\n"):
        failures.append(f"{doc_path}: its table differs from `tutti-config {flag}` "
                        "(run tests/docs/check_settings.py build/bin/tutti-config . --write)")


names = set(subprocess.run([tool, "--names"], check=True, capture_output=True, text=True).stdout.split())
failures = []
check_table("configuration.md", "--markdown")
check_table("algorithms.md", "--algorithms")

used = {}
for sub in ("src", "tools", "python/src", "python/tutti"):
    out = subprocess.run(["grep", "-rnoE", r'"TUTTI_[A-Z0-9_]+', f"{root}/{sub}", "--include=*.cc", "--include=*.h",
                          "--include=*.py"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        where, name = line.rsplit(":", 1)
        used.setdefault(name.strip('"'), where)
for name, where in sorted(used.items()):
    if name not in names:
        failures.append(f"{where}: {name} is not in the settings table (src/common/settings.cc)")

out = subprocess.run(["grep", "-rln", "getenv", f"{root}/src"], capture_output=True, text=True).stdout.split()
for path in out:
    if not path.endswith("/common/settings.cc") and not path.endswith("/common/settings.h"):
        failures.append(f"{path}: calls getenv (settings come from common/settings.h)")

for f in failures:
    print(f)
if failures:
    sys.exit(1)
print(f"{len(names)} settings and the algorithms: the docs' tables, the names in use and the library's reads agree with the table")
