"""One rank of test_reproducible.py: reproducible sums (comm.reproducible)
against exact references, and their bits under every arrangement of the
contributions among the ranks.

Each case draws every rank's contribution from (case, contribution index),
so every rank knows all of them. The exact sum comes from fractions
(Fraction), rounded once to the dtype by hand (nearest, ties to even,
subnormals included), and for float64 also from math.fsum; every element
of every result must equal it. The cases: random values over the whole
exponent range, cancellation (a contribution negated by another), values
far apart, subnormals, ties, overflow; float64, float32, float16 and
complex128 (as its parts); all_reduce, reduce to every root and
reduce_scatter; SUM and AVG. Each case runs under three arrangements
(rank r holds contribution perm[r]) and the bytes must not change. Prints
"ok <cases>" last.
"""
import math
import os
import sys
from fractions import Fraction

import numpy as np

import tutti

rank = int(os.environ["RANK"])
n = int(os.environ["WORLD_SIZE"])
comm = tutti.init(timeout=60)
assert not comm.reproducible, "TUTTI_REPRODUCIBLE is not set here: off at the start"
comm.reproducible = True
assert comm.reproducible

# (precision p, least exponent of a unit, largest finite) per numpy type.
REAL = {np.float64: (53, -1074, float(np.finfo(np.float64).max)),
        np.float32: (24, -149, float(np.finfo(np.float32).max)),
        np.float16: (11, -24, float(np.finfo(np.float16).max))}
DT = {np.float64: tutti.float64, np.float32: tutti.float32, np.float16: tutti.float16,
      np.complex128: tutti.complex128}


def round_once(q, t):
    """The Fraction q rounded to numpy type t: nearest, ties to even."""
    p, lsb_min, top = REAL[t]
    if q == 0:
        return 0.0
    a = abs(q)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:  # 2^e <= a < 2^(e+1)
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    unit = max(e - p + 1, lsb_min)
    scaled = a / Fraction(2) ** unit
    k = math.floor(scaled)
    rest = scaled - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2 == 1):
        k += 1
    v = float(Fraction(k) * Fraction(2) ** unit)  # exact in a double
    if v > top:
        v = math.inf
    return -v if q < 0 else v


def draw(case, who, size, t):
    """Contribution `who` of a case: a mix of the adversarial kinds."""
    g = np.random.default_rng([case, who, 11])
    real = np.float64 if t == np.complex128 else t
    count = size * (2 if t == np.complex128 else 1)
    p, lsb_min, top = REAL[real]
    lo, hi = lsb_min + p - 1, math.floor(math.log2(top))
    kind = case % 5
    if kind == 0:  # the whole exponent range
        e = g.integers(lo - p + 1, hi, count)
    elif kind == 1:  # within a few binades
        e = g.integers(-3, 4, count)
    elif kind == 2:  # far apart: huge and tiny mixed
        e = np.where(g.random(count) < 0.5, g.integers(hi - 20, hi - 4, count), g.integers(lo - p + 1, lo + 10, count))
    elif kind == 3:  # near the subnormal range
        e = g.integers(lsb_min, lo + 3, count)
    else:  # around one, for ties and cancellation
        e = g.integers(-p - 2, 2, count)
    m = 1 + g.random(count)
    v = np.ldexp(m, e.astype(np.int32)) * np.where(g.random(count) < 0.5, -1, 1)
    x = v.astype(real)  # may round; overflow to inf does not occur (hi - 4)
    if case % 3 == 1 and who == 1:
        x = -draw(case, 0, size, t).view(real)  # cancels contribution 0 exactly
    return x.view(t) if t == np.complex128 else x


cases = 0
perms = [list(range(n)), list(reversed(range(n))), [(i + 1) % n for i in range(n)]]
for t in (np.float64, np.float32, np.float16, np.complex128):
    real = np.float64 if t == np.complex128 else t
    for coll in ("all_reduce", "reduce", "reduce_scatter"):
        for op in (tutti.SUM, tutti.AVG):
            for size in (1, 5, 700):
                cases += 1
                case = cases * 7 + 3
                total = size * n if coll == "reduce_scatter" else size
                parts = [draw(case, q, total, t) for q in range(n)]
                root = case % n
                first = None
                for perm in perms:
                    x = parts[perm[rank]].copy()
                    out = np.zeros(size, dtype=t)
                    if coll == "all_reduce":
                        comm.all_reduce(x, out, op=op)
                    elif coll == "reduce":
                        comm.reduce(x, out, root=root, op=op)
                    else:
                        comm.reduce_scatter(x, out, op=op)
                    if coll == "reduce" and rank != root:
                        continue
                    if first is None:
                        first = out.copy()
                    elif out.tobytes() != first.tobytes():
                        raise AssertionError(f"rank {rank}: case {case} ({coll}, {t.__name__}): another arrangement "
                                             f"of the contributions gave other bits")
                if first is None:
                    continue
                # The exact sums, part by part.
                at = rank * size if coll == "reduce_scatter" else 0
                got = first.view(real)
                views = [pp.view(real) for pp in parts]
                width = 2 if t == np.complex128 else 1
                for i in range(size * width):
                    vals = [float(v[at * width + i]) for v in views]
                    exact = sum((Fraction(v) for v in vals), Fraction(0))
                    if op.kind == tutti.ReduceOpKind.AVG:
                        exact /= n
                    want = round_once(exact, real)
                    if real == np.float64 and op.kind == tutti.ReduceOpKind.SUM and not math.isinf(want):
                        assert math.fsum(vals) == want, (vals, want)  # fsum: correctly rounded too
                    g = float(got[i])
                    if g != want or (want == 0 and math.copysign(1, g) != math.copysign(1, want)):
                        raise AssertionError(f"rank {rank}: case {case} ({coll}, {t.__name__}, "
                                             f"{op.kind.name}), element {i}: {g!r}, exact sum rounded once "
                                             f"{want!r} (contributions {vals})")
comm.barrier()
print(f"ok {cases}")
sys.stdout.flush()
