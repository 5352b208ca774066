#!/usr/bin/env python3
"""The include graph of src/ against the layer picture of docs/architecture.md.

The picture's code block under "## Layers" lists the directories of src/,
top to bottom, one a line ("src/core/ ..."). A file of a layer may include
its own layer's headers, those of any layer below it, the public headers
(include/tutti/, "tutti/...") and system headers; never a layer above it.
Every directory of src/ must be in the picture, and every directory in the
picture must exist.

Usage: check_layers.py <source root>
Exit 0 and "ok: <n> files, <m> includes" when it holds; 1 with each
offending include (file:line, the layer it reaches) when it does not.
"""
import os
import re
import sys


def layers(root):
    doc = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    m = re.search(r"^## Layers\n(.*?)^```\n(.*?)^```", doc, re.S | re.M)
    if not m:
        sys.exit("docs/architecture.md: no code block under '## Layers'")
    order = []
    for line in m.group(2).splitlines():
        w = re.match(r"src/([a-z_/]+?)/?\s", line + " ")
        if w:
            order.append(w.group(1).rstrip("/"))
    if not order:
        sys.exit("docs/architecture.md: the '## Layers' block names no src/ directory")
    return order


def layer_of(path, order):
    """The layer of a path relative to src/ ("transport/tcp/x.cc" -> "transport")."""
    best = None
    for name in order:
        if path == name or path.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    order = layers(root)
    rank = {name: i for i, name in enumerate(order)}  # 0: top
    src = os.path.join(root, "src")
    problems = []
    for name in order:
        if not os.path.isdir(os.path.join(src, name)):
            problems.append(f"docs/architecture.md names src/{name}/, which does not exist")
    files = includes = 0
    for dirpath, _, names in os.walk(src):
        for f in sorted(names):
            if not f.endswith((".h", ".cc")):
                continue
            path = os.path.relpath(os.path.join(dirpath, f), src)
            mine = layer_of(path, order)
            if mine is None:
                problems.append(f"src/{path}: its directory is not in docs/architecture.md's layer picture")
                continue
            files += 1
            for n, line in enumerate(open(os.path.join(dirpath, f), encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                target = m.group(1)
                if target.startswith("tutti/"):
                    continue  # the public declarations
                includes += 1
                theirs = layer_of(target, order)
                if theirs is None:
                    problems.append(f"src/{path}:{n}: includes \"{target}\", in no layer of the picture")
                elif rank[theirs] < rank[mine]:
                    problems.append(f"src/{path}:{n}: {mine} includes \"{target}\" of {theirs}, a layer above it")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok: {files} files, {includes} includes, layers {' > '.join(order)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
