"""Reproducible sums from Python: the exact sum rounded once, checked with
fractions and math.fsum on 2, 3 and 4 ranks in shared memory and on 3 over
TCP, whatever rank holds which contribution (reproducible_worker.py); and
DistributedDataParallel training under torch.use_deterministic_algorithms,
twice with the tuner on, over TCP on 2 and 4 ranks: bit-identical
parameters (ddp_repro_worker.py)."""
import ranks

import torch  # noqa: F401
import tutti.torch  # noqa: F401  (a test without it fails, it does not skip)


def test_exact_sums_rounded_once_on_2_3_and_4_ranks_and_over_tcp():
    for n, env in ((2, {}), (3, {}), (4, {}), (3, {"TUTTI_TRANSPORT": "tcp"})):
        r = ranks.run_ranks(n, "reproducible_worker.py", timeout=300, env=env).check()
        assert all(o.strip().splitlines()[-1].startswith("ok ") for o in r.outs), r.report()


def train(n, how):
    env = {"TUTTI_TRANSPORT": "tcp", "TUTTI_ALGO_TUNING": "on"}
    r = ranks.run_ranks(n, "ddp_repro_worker.py", args=(how,), timeout=300, env=env).check()
    mode, digest = r.outs[0].strip().splitlines()[-2:]
    return mode, digest


def test_ddp_trained_twice_gives_the_same_parameters_under_deterministic_algorithms():
    for n in (2, 4):
        first, second = train(n, "deterministic"), train(n, "deterministic")
        assert first[0] == "reproducible", first
        assert first == second, (n, first, second)
