"""What torch users and torch's own tests expect of a CPU backend beyond the
operations (torch_conventions_worker.py says what each part checks): the
process group ignores launcher variables, records profiler events, reduces
sparse tensors, says "Timed out" and runs monitored_barrier as gloo does."""
import os
import subprocess
import sys

import pytest

import ranks

import torch  # noqa: E402,F401
import tutti.torch  # noqa: E402,F401  (a test without it fails, it does not skip)


def run_part(part, n, tmp_path, env_of=lambda r: {}, timeout=240):
    store = str(tmp_path / "store")
    procs = []
    for r in range(n):
        e = ranks.child_env({"TUTTI_TEST_RANK": str(r), "TUTTI_TEST_WORLD": str(n), "TUTTI_TEST_STORE": store})
        for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            e.pop(v, None)
        e.update(env_of(r))
        procs.append(subprocess.Popen([ranks.PYTHON, os.path.join(ranks.HERE, "torch_conventions_worker.py"), part],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    r = ranks.collect(procs, timeout, 5.0).check()
    for out in r.outs:
        assert out.strip().splitlines()[-1].startswith("ok "), r.report()
    return r


def test_launcher_variables_do_not_overrule_torch(tmp_path):
    stale = [{"WORLD_SIZE": "3"},
             {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"},
             {"MASTER_ADDR": "nowhere.invalid", "MASTER_PORT": "29400"}]
    run_part("env", 3, tmp_path, lambda r: stale[r])


@pytest.mark.parametrize("n", [2, 3])
def test_profiler_events(n, tmp_path):
    run_part("profiling", n, tmp_path)


@pytest.mark.parametrize("n", [2, 3])
def test_sparse_all_reduce(n, tmp_path):
    run_part("sparse", n, tmp_path)


def test_timeouts_say_timed_out(tmp_path):
    run_part("timeouts", 3, tmp_path)


@pytest.mark.parametrize("n", [2, 3])
def test_monitored_barrier(n, tmp_path):
    run_part("monitored", n, tmp_path)


def test_groups_split_shrink_timeout(tmp_path):
    run_part("groups", 4, tmp_path, lambda r: {"TUTTI_TRANSPORT": "tcp"})
