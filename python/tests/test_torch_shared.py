"""Tensors in shared memory (tutti.torch.empty, shared_worker.py) on 2, 3
and 4 ranks: every dtype and reduce op of all_reduce on them, directly, and
on heap tensors; the other collectives on them; each rank lets go of them
on its own."""
import ranks

import torch  # noqa: F401
import tutti.torch  # noqa: F401  (a test without it fails, it does not skip)


def test_shared_tensors_on_2_3_and_4_ranks():
    for n in (2, 3, 4):
        r = ranks.run_ranks(n, "shared_worker.py", timeout=240, env={"TUTTI_SHM_ONESHOT_BYTES": "16384"}).check()
        assert all(o.strip().splitlines()[-1] == "ok" for o in r.outs), r.report()
