"""The "tutti" torch.distributed backend after a failure: DDP survivors
shrink and carry on exactly as a fresh job would (ddp_survive_worker.py); a
group aborted from another thread fails its pending Work, and groups made
again and again in the same processes leak no thread, socket or
shared-memory segment (pg_lifecycle_worker.py); torchrun --max_restarts
restarts a failed group, which meets again on the same port
(torchrun_restart_worker.py)."""
import os
import tempfile

import pytest

import ranks

import torch  # noqa: E402,F401
import tutti.torch  # noqa: E402,F401  (a test without it fails, it does not skip)


def test_ddp_survivors_shrink_and_match_a_fresh_run():
    with tempfile.TemporaryDirectory(prefix="tutti-ddp-survive-") as d:
        r = ranks.run_ranks(4, "ddp_survive_worker.py", args=("kill", d), timeout=180, grace=60.0)
        assert r.codes[3] == -9, r.report()
        for i in range(3):
            assert r.codes[i] == 0 and r.outs[i].strip().splitlines()[-1] == "ok", r.report()
        f = ranks.run_ranks(3, "ddp_survive_worker.py", args=("fresh", d), timeout=180).check()
        assert all(o.strip().splitlines()[-1] == "ok" for o in f.outs), f.report()
        print(f.outs[0].strip().splitlines()[0])


def test_abort_from_another_thread_and_new_groups_leak_nothing():
    prefix = f"tutti-pytest-lifecycle-{os.getpid()}"
    r = ranks.run_ranks(2, "pg_lifecycle_worker.py", args=[str(ranks.free_port()) for _ in range(20)], timeout=300,
                        env={"TUTTI_SHM_PREFIX": prefix}).check()
    assert all(o.strip().splitlines()[-1].startswith("ok") for o in r.outs), r.report()
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]


def test_torchrun_restarts_the_group_on_the_same_port():
    port = ranks.free_port()
    with tempfile.TemporaryDirectory(prefix="tutti-torchrun-") as logs:
        # --redirects/--tee 1: the workers' stdout goes to the log folder and
        # to torchrun's own, which the test reads.
        r = ranks.run_command([ranks.PYTHON, "-m", "torch.distributed.run", "--nproc_per_node=2", "--max_restarts=1",
                               "--monitor_interval=0.2", f"--master_port={port}", "--redirects", "1", "--tee", "1",
                               "--log_dir", logs, os.path.join(ranks.HERE, "torchrun_restart_worker.py")],
                              timeout=180)
    out = r.outs[0] + r.errs[0]
    assert r.codes[0] == 0, r.report()
    assert "failed (exitcode: 3) local_rank: 1" in out, r.report()
    for rank in (0, 1):
        assert f"attempt 0 rank {rank} sum 3 port {port}" in out, r.report()
        assert f"attempt 1 rank {rank} sum 3 port {port}" in out, r.report()
        assert f"attempt 1 rank {rank} done" in out, r.report()
