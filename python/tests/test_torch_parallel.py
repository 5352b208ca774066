"""torch 2.x parallelism on tutti (parallel_worker.py): a device mesh and
its groups, DTensor, tensor parallelism, FSDP2 and HSDP against gloo and a
distributed checkpoint saved on 4 ranks; then on 2 ranks FSDP2, that
checkpoint loaded, functional collectives eager and compiled by inductor,
futures whose callbacks wait for operations, DDP comm hooks and
static_graph against gloo, and pipeline schedules."""
import ranks

import torch  # noqa: F401
import tutti.torch  # noqa: F401  (a test without it fails, it does not skip)


def test_parallelism_on_4_then_2_ranks(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    # inductor's compiled code goes to a directory of this test, removed with it
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    for n in (4, 2):
        r = ranks.run_ranks(n, "parallel_worker.py", args=(n, checkpoint), timeout=300, env=env).check()
        assert all(o.strip().splitlines()[-1] == "ok" for o in r.outs), r.report()
