"""The seed tutorial's nine torch.distributed examples
(python/examples/seed_examples.py) on 2 and 4 ranks print with tutti what
they print with gloo, and what the tutorial says."""
import os
import re
import sys

import pytest

import ranks

import torch  # noqa: E402,F401
import tutti.torch  # noqa: E402,F401  (a test without it fails, it does not skip)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "seed_examples.py")


def by_rank(text):
    """Each rank's lines, in order (the ranks' lines interleave in the output)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"Rank\s+(\d+)", line)
        assert m, f"unexpected line {line!r}"
        out.setdefault(int(m.group(1)), []).append(line)
    return out


def examples(backend, n):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ranks.free_port())}
    r = ranks.run_command([sys.executable, EXAMPLES, backend, str(n)], timeout=240, env=env).check()
    return by_rank(r.outs[0])


def section(lines, r, name):
    """The lines rank r printed for one example (after its header line)."""
    start = lines.index(f"Rank {r}: == {name}") + 1
    end = start
    while end < len(lines) and not lines[end].startswith(f"Rank {r}: == "):
        end += 1
    return lines[start:end]


@pytest.mark.parametrize("n", [2, 4])
def test_seed_examples_print_what_gloo_prints(n):
    gloo, tutti = examples("gloo", n), examples("tutti", n)
    assert sorted(gloo) == sorted(tutti) == list(range(n))
    names = ["p2p_block_func", "p2p_unblock_func", "broadcast_func", "reduce_func", "allreduce_func", "gather_func",
             "allgather_func", "scatter_func", "reduce_scatter_func"]
    has = lambda v: f"has data  {v}"  # noqa: E731
    t = lambda v: torch.tensor([float(v)])  # noqa: E731
    for r in range(n):
        assert [l for l in gloo[r] if "==" in l] == [f"Rank {r}: == {x}" for x in names], gloo[r]
        assert [l for l in tutti[r] if "==" in l] == [f"Rank {r}: == {x}" for x in names], tutti[r]
        for name in names:
            g, u = section(gloo[r], r, name), section(tutti[r], r, name)
            if name == "reduce_func" and r != 1:
                # Off the root the tensor is unspecified (torch's documentation,
                # the tutorial): gloo leaves its tree's partial sums there
                # (2 ranks: rank 0 [2.]; 4 ranks: [4.], -, [2.], [1.]), tutti
                # leaves the input.
                assert u == [f"Rank  {r}  {has(t(1))}"], u
            else:
                assert g == u, f"rank {r}, {name}:\ngloo:  {g}\ntutti: {u}"
    # what the tutorial says the examples print
    assert section(tutti[1], 1, "p2p_block_func") == [f"Rank  1  {has(t(1))}"]
    assert section(tutti[1], 1, "reduce_func") == [f"Rank  1  {has(t(n))}"]
    for r in range(n):
        assert section(tutti[r], r, "allreduce_func") == [f"Rank  {r}  {has(t(n))}"]
        assert section(tutti[r], r, "broadcast_func") == [f"Rank  {r}  {has(t(1))}"]
        assert section(tutti[r], r, "scatter_func") == [f"Rank  {r}  {has(t(r + 1))}"]
        assert section(tutti[r], r, "allgather_func") == [f"Rank  {r}  {has([t(i) for i in range(n)])}"]
        assert section(tutti[r], r, "reduce_scatter_func") == [f"Rank  {r}  {has(t(r * n))}"]
    assert section(tutti[1], 1, "gather_func") == [f"Rank  1  {has([t(i) for i in range(n)])}"]
