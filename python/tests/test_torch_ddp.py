"""tutti as a torch.distributed backend under DistributedDataParallel, on 2
and 3 ranks: the same model trained with gloo and with tutti (buckets
reduced inline and asynchronously) ends with the same parameters
(ddp_worker.py)."""
import pytest

import ranks

import torch  # noqa: E402,F401
import tutti.torch  # noqa: E402,F401  (a test without it fails, it does not skip)


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_matches_gloo(n):
    r = ranks.run_ranks(n, "ddp_worker.py", timeout=180).check()
    assert all(o.strip().splitlines()[-1] == "ok" for o in r.outs), r.report()
