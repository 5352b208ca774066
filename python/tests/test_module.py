"""The tutti module: types and errors in this process, every operation on 2
and 3 ranks (module_worker.py)."""
import numpy as np
import pytest

import ranks
import tutti


def test_types():
    assert tutti.float32 == tutti.DataType.float32 and tutti.dtype_size(tutti.complex128) == 16
    assert len(tutti.DataType.__members__) == 14
    assert tutti.premul_sum(0.5).scalar == 0.5 and tutti.AVG.kind == tutti.ReduceOpKind.AVG
    assert "meaningless" in tutti.reduce_op_invalid_reason(tutti.float32, tutti.BXOR)
    assert tutti.reduce_op_invalid_reason(tutti.int32, tutti.BXOR) == ""


def test_error_classes():
    assert issubclass(tutti.Error, RuntimeError)
    names = {"InvalidArgument", "Timeout", "PeerLost", "Mismatch", "Aborted", "Internal", "Unauthenticated", "Revoked"}
    assert names <= set(tutti.error_classes), tutti.error_classes
    for name, cls in tutti.error_classes.items():
        assert issubclass(cls, tutti.Error) and cls.__name__ == name and getattr(tutti, name) is cls


def test_store_with_another_secret_is_unauthenticated():
    server = tutti.TcpStoreServer("127.0.0.1", 0, secret="right")
    good = tutti.tcp_store_client("127.0.0.1", server.port, timeout=5, secret="right")
    good.set("k", b"v")
    assert good.get("k") == b"v"
    good.set("k2", b"\x00w")
    assert good.multi_get(["k2", "k"]) == [b"\x00w", b"v"]
    good.timeout = 0.2
    with pytest.raises(tutti.Timeout, match="missing keys: 'absent'"):
        good.multi_get(["k", "absent"])
    for wrong in ("wrong", ""):
        try:
            tutti.tcp_store_client("127.0.0.1", server.port, timeout=5, secret=wrong)
        except tutti.Unauthenticated as e:
            assert e.kind == "Unauthenticated"
            assert f"127.0.0.1:{server.port} does not know this job's secret" in e.message, e.message
        else:
            raise AssertionError("a client with another secret was served")


def test_job_of_one():
    comm = tutti.init(rank=0, world_size=1)
    assert (comm.rank, comm.size) == (0, 1)
    x = np.random.default_rng(1).random(10) + 0.5
    y = np.zeros(10)
    comm.all_reduce(x, y, op=tutti.MAX)
    assert np.array_equal(x, y)
    out = np.zeros(10)
    w = comm.iall_gather(x, out)
    w.wait()
    assert np.array_equal(out, x) and w.test()
    with pytest.raises(tutti.InvalidArgument) as e:
        comm.all_reduce(np.zeros(3), np.zeros(4))
    assert e.value.kind == "InvalidArgument" and "recvbuf holds 4 elements" in e.value.message
    with pytest.raises(tutti.InvalidArgument, match="premul_sum on int32 needs an integral scalar"):
        comm.all_reduce(np.ones(2, np.int32), op=tutti.premul_sum(0.5))


def test_revoke_agree_shrink():
    r = ranks.run_ranks(4, "survive_worker.py", timeout=120, grace=30.0)
    assert r.codes[3] == -9, r.report()
    for i in range(3):
        assert r.codes[i] == 0 and r.outs[i].strip().splitlines()[-1] == "ok", r.report()


@pytest.mark.parametrize("n", [2, 3])
def test_every_operation(n):
    r = ranks.run_ranks(n, "module_worker.py", timeout=180).check()
    for out in r.outs:
        assert out.strip().splitlines()[-1].startswith("ok "), r.report()
