"""A rank of test_torch_shared.py: tensors in shared memory from
tutti.torch.empty, and every dtype and reduce op of all_reduce on them and
on ordinary (heap) tensors, checked element by element against the sum the
ranks' random inputs give; which path ran, from the group's flight recorder.
Prints "ok" last."""
import json
import sys

import torch
import torch.distributed as dist

import tutti.torch

# Above TUTTI_SHM_ONESHOT_BYTES (the test sets 16 KiB) for every dtype, and
# an odd count no world size divides: two-shot. SMALL: one-shot.
COUNT = 16411
SMALL = 1031

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]
# The relative error of one rounding.
REL = {torch.float32: 2.0**-23, torch.float64: 2.0**-52, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def fail(what):
    raise AssertionError(f"rank {dist.get_rank()}: {what}")


def last_algorithm(op):
    entries = [e for e in json.loads(tutti.torch.trace_json())["ops"] if e.get("op") == op]
    return entries[-1].get("algo", "?") if entries else "none"


def inputs(case, dtype, op, n, count=COUNT):
    """Every rank's input of a case (the same on every rank: seeded by case and rank); op: its name."""
    out = []
    for q in range(n):
        g = torch.Generator().manual_seed(1000 * case + q)
        if dtype in FLOATS:
            lo, hi = (0.5, 1.5) if op == "product" else (-4.0, 4.0)
            out.append((torch.rand(count, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype))
        else:
            lo, hi = (1, 3) if op == "product" else (0, 30) if dtype == torch.uint8 else (-30, 30)
            out.append(torch.randint(lo, hi + 1, (count,), generator=g, dtype=torch.int64).to(dtype))
    return out


def expected(parts, dtype, op, n):
    """The result of op (its name) over every rank's input, in float64 or int64."""
    wide = [p.to(torch.float64 if dtype in FLOATS else torch.int64) for p in parts]
    if op in ("sum", "avg", "premul_sum"):
        v = sum(wide)
    elif op == "product":
        v = wide[0].clone()
        for w in wide[1:]:
            v *= w
    elif op == "min":
        v = torch.stack(wide).min(0).values
    elif op == "max":
        v = torch.stack(wide).max(0).values
    else:
        v = wide[0].clone()
        f = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
        for w in wide[1:]:
            v = f(v, w)
    if op == "avg":
        v = v / n
    if op == "premul_sum":
        v = v * 2.0
    return v


def check(got, want, dtype, what, parts=None, roundings=1):
    if dtype in FLOATS:
        g = got.to(torch.float64)
        # One rounding to the dtype at the end (float16 and bfloat16
        # accumulate in float32; Avg rounds the sum, then its quotient),
        # beside float32's or float64's own accumulation error, bounded by
        # the inputs' magnitudes.
        acc = 2.0**-48 if dtype == torch.float64 else 2.0**-20
        bound = roundings * REL[dtype] * want.abs()
        if parts is not None:
            bound = bound + acc * sum(p.to(torch.float64).abs() for p in parts)
        else:
            bound = bound + acc * (1 + want.abs())
        bad = ((g - want).abs() > bound).nonzero()
    else:
        bad = (got.to(torch.int64) != want.to(dtype).to(torch.int64)).nonzero()
    if len(bad):
        i = int(bad[0])
        fail(f"{what}: element {i} is {got[i].item()}, expected {want[i].item()} ({len(bad)} wrong)")


def main():
    dist.init_process_group("tutti")
    r, n = dist.get_rank(), dist.get_world_size()

    # tutti.torch.empty: shapes, dtypes, sizes that differ by rank, page-aligned memory.
    t = tutti.torch.empty(3, 5, dtype=torch.bfloat16)
    if t.shape != (3, 5) or t.dtype != torch.bfloat16 or t.device.type != "cpu" or not t.is_contiguous():
        fail(f"empty(3, 5, bfloat16) gave {t.shape} {t.dtype} {t.device}")
    u = tutti.torch.empty((r + 1, 7))
    if u.shape != (r + 1, 7) or u.dtype != torch.get_default_dtype() or u.data_ptr() % 4096:
        fail(f"empty((r + 1, 7)) gave {u.shape} {u.dtype} at {u.data_ptr():#x}")
    del t, u

    case = 0
    R = dist.ReduceOp

    def ran_directly(op, what, direct):
        ran = last_algorithm(op)
        if (ran == "shm_direct") != direct:
            fail(f"{what} ran {ran}, expected {'shm_direct' if direct else 'another path'}")

    # Every dtype and reduce op of all_reduce (two-shot, then one-shot) and
    # reduce_scatter, on shared and on heap tensors: directly on shared
    # ones, but PremulSum (its scalar is applied to each rank's input first).
    for dtype in FLOATS + INTS:
        ops = [("sum", R.SUM), ("product", R.PRODUCT), ("min", R.MIN), ("max", R.MAX)]
        ops += ([("avg", R.AVG), ("premul_sum", dist._make_nccl_premul_sum(2.0))] if dtype in FLOATS
                else [("band", R.BAND), ("bor", R.BOR), ("bxor", R.BXOR)])
        shared = tutti.torch.empty(COUNT, dtype=dtype)
        small = tutti.torch.empty(SMALL, dtype=dtype)
        scattered = tutti.torch.empty(n * COUNT, dtype=dtype)
        block = tutti.torch.empty(COUNT, dtype=dtype)
        for name, op in ops:
            for path in ("shared", "heap"):
                for count, mine in ((COUNT, shared), (SMALL, small)):
                    case += 1
                    parts = inputs(case, dtype, name, n, count)
                    x = mine if path == "shared" else torch.empty(count, dtype=dtype)
                    x.copy_(parts[r])
                    dist.all_reduce(x, op=op)
                    what = f"all_reduce {dtype} {name} of {count} on {path} tensors"
                    check(x, expected(parts, dtype, name, n), dtype, what, parts, 2 if name == "avg" else 1)
                    ran_directly("all_reduce", what, path == "shared" and name != "premul_sum")
                # reduce_scatter: rank q's input is n blocks of COUNT.
                case += 1
                parts = [torch.cat(inputs(case * 16 + q, dtype, name, n)) for q in range(n)]
                y = scattered if path == "shared" else torch.empty(n * COUNT, dtype=dtype)
                z = block if path == "shared" else torch.empty(COUNT, dtype=dtype)
                y.copy_(parts[r])
                dist.reduce_scatter_tensor(z, y, op=op)
                mine = [p[r * COUNT:(r + 1) * COUNT] for p in parts]
                what = f"reduce_scatter_tensor {dtype} {name} on {path} tensors"
                check(z, expected(mine, dtype, name, n), dtype, what, mine, 2 if name == "avg" else 1)
                ran_directly("reduce_scatter", what, path == "shared" and name != "premul_sum")
        del shared, small, scattered, block

    # The copying collectives, for each element size, on shared and heap
    # tensors (all_to_all_single in place copies through the segment).
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.uint8):
        for path in ("shared", "heap"):
            def make(count):
                return tutti.torch.empty(count, dtype=dtype) if path == "shared" else torch.empty(count, dtype=dtype)
            case += 1
            whole = [torch.cat(inputs(case * 16 + q, dtype, "sum", n)) for q in range(n)]  # n * COUNT each
            a = make(n * COUNT)
            a.copy_(whole[r])
            out = make(n * n * COUNT)
            dist.all_gather_into_tensor(out, a)
            what = f"all_gather_into_tensor {dtype} on {path} tensors"
            check(out, torch.cat(whole).to(torch.float64 if dtype in FLOATS else torch.int64), dtype, what)
            ran_directly("all_gather", what, path == "shared")
            b = make(n * COUNT)
            dist.all_to_all_single(b, a)
            what = f"all_to_all_single {dtype} on {path} tensors"
            want = torch.cat([whole[q][r * COUNT:(r + 1) * COUNT] for q in range(n)])
            check(b, want.to(torch.float64 if dtype in FLOATS else torch.int64), dtype, what)
            ran_directly("all_to_all", what, path == "shared")
            b.copy_(a)
            dist.all_to_all_single(b, b)
            check(b, want.to(torch.float64 if dtype in FLOATS else torch.int64), dtype, what + ", in place")
            ran_directly("all_to_all", what + ", in place", False)
            c = make(n * COUNT)
            if r == n - 1:
                c.copy_(a)
            dist.broadcast(c, src=n - 1)
            what = f"broadcast {dtype} on {path} tensors"
            check(c, whole[n - 1].to(torch.float64 if dtype in FLOATS else torch.int64), dtype, what)
            ran_directly("broadcast", what, path == "shared")
            del a, b, c, out

    # tutti.torch.all_reduce_: in place, blocking, without torch's dispatch;
    # on shared and heap tensors, for each float dtype; refuses a view.
    for dtype in FLOATS:
        for path in ("shared", "heap"):
            case += 1
            parts = inputs(case, dtype, "sum", n)
            x = tutti.torch.empty(COUNT, dtype=dtype) if path == "shared" else torch.empty(COUNT, dtype=dtype)
            x.copy_(parts[r])
            if tutti.torch.all_reduce_(x) is not x:
                fail("all_reduce_ did not return its tensor")
            what = f"all_reduce_ {dtype} on {path} tensors"
            check(x, expected(parts, dtype, "sum", n), dtype, what, parts)
            ran_directly("all_reduce", what, path == "shared")
            tutti.torch.all_reduce_(x, op=R.MAX)
            check(x, expected(parts, dtype, "sum", n), dtype, what + ", MAX of equal tensors", parts)
    try:
        tutti.torch.all_reduce_(torch.ones(8, 4).t())
        fail("all_reduce_ took a tensor that is not contiguous")
    except tutti.InvalidArgument as e:
        if "contiguous" not in str(e):
            fail(f"all_reduce_ of a view: {e}")

    # Freed on each rank's own time: rank 0 lets go first, then passes a
    # heap tensor where the others pass shared ones; still right.
    s = tutti.torch.empty(COUNT)
    if r == 0:
        del s
        s = torch.empty(COUNT)
    case += 1
    parts = inputs(case, torch.float32, "sum", n)
    s.copy_(parts[r])
    dist.all_reduce(s)
    check(s, expected(parts, torch.float32, "sum", n), torch.float32, "all_reduce, one rank on the heap")
    if last_algorithm("all_reduce") == "shm_direct":
        fail("ran directly where rank 0 passed a heap tensor")

    # A tensor outlives its group.
    keep = tutti.torch.empty(1000)
    keep.fill_(r + 0.5)
    dist.destroy_process_group()
    if keep.sum().item() != 1000 * (r + 0.5):
        fail("a shared tensor changed after its group was destroyed")
    print("ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
