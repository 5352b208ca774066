"""tutti as a torch.distributed backend: every operation on 2 and 3 ranks
(torch_worker.py) and the ways to make a group: env://, tcp://, file://, a
store, backend "cpu:tutti", and a tutti group in a gloo world. DistributedDataParallel against gloo
is in test_torch_ddp.py, the seed tutorial's nine examples against gloo in
test_torch_seed_examples.py."""
import pytest

import ranks

import torch  # noqa: E402,F401
import tutti.torch  # noqa: E402,F401  (a test without it fails, it does not skip)


@pytest.mark.parametrize("n", [2, 3])
def test_every_operation(n):
    r = ranks.run_ranks(n, "torch_worker.py", timeout=300).check()
    for out in r.outs:
        assert out.strip().splitlines()[-1].startswith("ok "), r.report()


def test_init_methods(tmp_path):
    ports = [str(ranks.free_port()) for _ in range(5)]
    r = ranks.run_ranks(2, "torch_worker.py", ["inits", str(tmp_path / "store"), *ports], timeout=120).check()
    for out in r.outs:
        assert out.strip().splitlines()[-5:] == ["ok tcp", "ok file", "ok store", "ok cpu", "ok gloo-world"], \
            r.report()
