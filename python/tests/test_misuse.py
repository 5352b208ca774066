"""Careless and hostile use of the tutti module: each case fails fast with
an error that names it, or carries on, and never hangs or corrupts
(misuse_worker.py for the multi-rank cases)."""
import glob
import os

import numpy as np
import pytest

import ranks
import tutti


@pytest.fixture(autouse=True)
def own_segments():
    """Each test's ranks name their shared memory with a prefix of its own;
    what ranks that died or left in the middle of an operation could not
    remove goes at the end, whatever the outcome."""
    prefix = f"tutti-test-misuse-{os.getpid()}"
    os.environ["TUTTI_SHM_PREFIX"] = prefix
    yield
    del os.environ["TUTTI_SHM_PREFIX"]
    for path in glob.glob(f"/dev/shm/{prefix}-*"):
        os.unlink(path)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("how", ["exit", "raise", "torch_exit"])
def test_a_rank_that_leaves_is_named_within_a_second(how, transport):
    env = {"TUTTI_TRANSPORT": "tcp"} if transport == "tcp" else {}
    r = ranks.run_ranks(3, "misuse_worker.py", ("leave", how), timeout=60, env=env)
    assert r.codes[2] == (1 if how == "raise" else 0), r.report()
    for i in range(2):
        assert r.codes[i] == 0 and r.outs[i].strip().endswith("ok"), r.report()


@pytest.mark.parametrize("how", ["recv", "wait", "all_reduce", "torch_small", "torch_large", "torch_recv",
                                 "torch_wait"])
def test_ctrl_c_raises_keyboard_interrupt_at_once(how):
    ranks.run_ranks(2, "misuse_worker.py", ("sigint", how), timeout=60).check()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_forked_child_cannot_act_as_the_rank(transport):
    env = {"TUTTI_TRANSPORT": "tcp"} if transport == "tcp" else {}
    ranks.run_ranks(2, "misuse_worker.py", ("fork",), timeout=60, env=env).check()


def test_a_strangers_connections_cost_the_job_nothing():
    r = ranks.run_ranks(3, "misuse_worker.py", ("strangers",), timeout=90).check()
    assert all(out.strip().splitlines()[-1].startswith("ok ") for out in r.outs), r.report()


@pytest.mark.parametrize("setting", [None, "0.0.0.0"])
def test_a_job_on_loopback_listens_on_loopback_unless_told(setting):
    env = {} if setting is None else {"TUTTI_LISTEN_ADDR": setting, "TUTTI_STORE_LISTEN_ADDR": setting}
    ranks.run_ranks(2, "misuse_worker.py", ("listen", setting or "127.0.0.1"), timeout=60, env=env).check()


def test_work_wait_without_a_finite_limit_waits():
    ranks.run_ranks(2, "misuse_worker.py", ("wait_inf",), timeout=60).check()


@pytest.fixture(scope="module")
def one():
    return tutti.init(rank=0, world_size=1)


def refused(fn, text):
    with pytest.raises(tutti.InvalidArgument) as e:
        fn()
    assert text in e.value.message, e.value.message


def test_buffers_whose_dtypes_differ_are_refused_though_their_bytes_agree(one):
    f64, f32 = np.random.default_rng(2).random(4), np.zeros(8, np.float32)
    say = "sendbuf holds float64 but recvbuf holds float32"
    refused(lambda: one.all_gather(f64, f32), say)
    refused(lambda: one.gather(f64, f32, 0), say)
    refused(lambda: one.scatter(f64, f32, 0), say)
    refused(lambda: one.reduce_scatter(f64, f32), say)
    refused(lambda: one.all_gather(f64, [f32]), "sendbuf holds float64 but a recvbuf entry holds float32")
    refused(lambda: one.gather(f64, [f32], 0), "sendbuf holds float64 but a recvbuf entry holds float32")
    refused(lambda: one.scatter([f64], f32, 0), "a sendbuf entry holds float64 but recvbuf holds float32")
    refused(lambda: one.reduce_scatter([f64], f32), "a sendbuf entry holds float64 but recvbuf holds float32")
    refused(lambda: one.iall_gather(f64, f32), say)
    # dtype= names same-size storage, never elements of another size
    refused(lambda: one.all_reduce(np.ones(4, np.float32), dtype=tutti.float64),
            "buffer holds float32 elements (4 bytes each), but dtype= says float64 (8 bytes)")
    refused(lambda: one.all_gather(f64, f32, dtype=tutti.float64),
            "recvbuf holds float32 elements (4 bytes each), but dtype= says float64 (8 bytes)")
    assert np.array_equal(f32, np.zeros(8, np.float32))
    bits = np.array([0x3F80, 0x4000], np.uint16)  # bfloat16 1.0, 2.0
    one.all_reduce(bits, dtype=tutti.bfloat16)
    assert bits.tolist() == [0x3F80, 0x4000]


def test_a_buffer_of_objects_is_refused_whatever_dtype_says(one):
    objs = np.array([object() for _ in range(4)], dtype=object)
    for dt in (tutti.int64, None):
        refused(lambda: one.recv(objs, 0, dtype=dt), "buffer format 'O' (item size 8) is not plain numeric data")
        refused(lambda: one.all_reduce(objs, dtype=dt), "is not plain numeric data")
    assert all(isinstance(o, object) for o in objs)


def test_a_port_out_of_range_is_refused_not_wrapped():
    for make in (lambda p: tutti.TcpStoreServer("127.0.0.1", p),
                 lambda p: tutti.tcp_store_client("127.0.0.1", p, timeout=1)):
        for port in (70000, 65536, -1):
            refused(lambda: make(port), f"port {port} of 127.0.0.1 is not a TCP port (0 to 65535)")


def test_a_local_rank_outside_the_local_world_is_refused():
    code = "import tutti\ntry:\n    tutti.init()\nexcept tutti.InvalidArgument as e:\n    print(e.message)\n"
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "7", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(ranks.free_port())}
    r = ranks.run_command([ranks.PYTHON, "-c", code], timeout=30, env=env).check()
    assert "LOCAL_RANK 7 is not below LOCAL_WORLD_SIZE 2" in r.outs[0], r.report()


def test_init_keeps_its_timeout_whatever_the_world_size():
    code = ("import time, tutti\nt = time.monotonic()\ntry:\n    tutti.init(timeout=2)\n"
            "except tutti.Timeout as e:\n    print(round(time.monotonic() - t, 2), e.message)\n")
    for size in (1 << 20, 1 << 24):
        env = {"RANK": "0", "WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ranks.free_port())}
        r = ranks.run_command([ranks.PYTHON, "-c", code], timeout=60, env=env).check()
        took, message = r.outs[0].split(" ", 1)
        assert float(took) < 2.8, r.report()
        assert "ranks 1, 2, 3," in message and f"never joined (world size {size})" in message, r.report()
