"""PyTorch's own distributed test suite
(torch.testing._internal.distributed.distributed_test, in the torch wheel)
against a backend, as torch's test/distributed/test_distributed_spawn.py
runs it, but with forked ranks (the ranks inherit the imported suite instead
of importing torch again for every test).

  run_suite.py --backend tutti --world-size 2 [-k PATTERN ...] [--json FILE]

Prints one line per test (PASS, SKIP with the reason, FAIL) and the counts;
exits non-zero if a test failed.
"""
import argparse
import ast
import atexit
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("-k", action="append", default=[], help="run the tests whose name contains one of these")
    p.add_argument("--list", action="store_true", help="list the tests and exit")
    p.add_argument("--world-size-gated", action="store_true",
                   help="only the tests whose world-size gates let them run at this size and at none of the "
                        "smaller sizes the test command runs (2, 3, 4)")
    p.add_argument("--json", help="write every test's outcome here")
    return p.parse_args()


args = parse()
os.environ["BACKEND"] = args.backend
os.environ["WORLD_SIZE"] = str(args.world_size)
os.environ.setdefault("TEMP_DIR", "/tmp")  # replaced per test by the suite's setUp
# As torch's run_test.py runs the spawn tests: a file:// init method (the
# suite's ranks use one file per test; test_barrier_timeout_global this one).
_init_dir = tempfile.mkdtemp(prefix="tutti-torch-suite-")
atexit.register(shutil.rmtree, _init_dir, True)
os.environ["INIT_METHOD"] = "file://" + os.path.join(_init_dir, "shared_init_file")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal import common_distributed  # noqa: E402

if args.backend == "tutti":
    import tutti.torch  # noqa: F401,E402  (registers the backend)
elif args.backend == "gloo_plugin":
    # gloo registered as a third-party backend is, through torch's plugin
    # mechanism: what this suite does with such a backend that is not the
    # backend's doing shows here (TORCH_DEFECTS).
    def _gloo_plugin(store, rank, size, timeout):
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    dist.Backend.register_backend("gloo_plugin", _gloo_plugin, devices=["cpu"])
if args.backend in ("tutti", "gloo_plugin"):
    # What the suite asks of a backend before it runs a test on it: a CPU
    # backend with DDP and sub-groups (the "gpu" and "cuda" features are
    # CUDA tensors).
    for feature in ("plugin", "ddp", "subgroup"):
        common_distributed.DistTestCases.backend_feature[feature].add(args.backend)

from torch.testing._internal.distributed import distributed_test as dt  # noqa: E402

if args.backend == "tutti":
    # tutti records profiler events (tutti:<op>), also for send and recv:
    # the suite checks them only for the backends in these lists.
    dt.PROFILING_SUPPORTED_BACKENDS.append("tutti")
    dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS.append("tutti")


# Tests that fail for a defect of torch's own, not of the backend's: each
# fails the same way against gloo registered as a third-party backend
# (`run_suite.py --backend gloo_plugin -k NAME`). The driver counts such a
# test as KNOWN only when it fails with this text; passing, or failing
# otherwise, fails the run (the defect was mended, or another came). torch's
# own gloo, not registered through register_backend, does not meet them.
TORCH_DEFECTS = {} if args.backend == "gloo" else {
    "test_ddp_logging_data_cpu": (
        "DDP logs ProcessGroup.getBackendName(), which torch 2.13 returns as 'custom' for every backend "
        "registered through Backend.register_backend; the test compares it with dist.get_backend()",
        f"String comparison failed: 'custom' != '{args.backend}'"),
}


# Tests the suite gates to other backends by name that describe what a CPU
# backend does: against tutti they run as they are, on its process groups.
# Each is listed with the reason of the gate it is run past; the driver
# fails if a test is missing or gated otherwise (a newer suite), rather than
# run something else. Gated tests that need CUDA devices keep their runtime
# checks and skip here, as they do for gloo.
GATED_TESTS_TUTTI_RUNS = {
    "Only gloo backend supports timeouts": [
        "test_barrier_timeout_global", "test_barrier_timeout_group", "test_barrier_timeout_full_group"],
    "GLOO Batch Send Recv CPU": ["test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags"],
    "Only Gloo backend supports sparse all reduce": ["test_sparse_all_reduce_sum"],
    "Test requires backend tutti to be one of {'gloo'}": [
        "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_product", "test_all_reduce_coalesced_min",
        "test_all_reduce_coalesced_max", "test_all_reduce_coalesced_group_sum",
        "test_all_reduce_coalesced_group_product", "test_all_reduce_coalesced_group_min",
        "test_all_reduce_coalesced_group_max", "test_all_reduce_coalesced_full_group_sum",
        "test_all_reduce_coalesced_full_group_product", "test_all_reduce_coalesced_full_group_min",
        "test_all_reduce_coalesced_full_group_max", "test_grads_same_across_ranks_with_no_sync",
        "test_scatter_object_list", "test_monitored_barrier_gloo", "test_monitored_barrier_gloo_subgroup",
        "test_monitored_barrier_gloo_rank_0_timeout", "test_monitored_barrier_failure_order",
        "test_monitored_barrier_wait_all_ranks"],
    "get_future is only supported on mpi, nccl and gloo": [
        "test_accumulate_gradients_no_sync", "test_accumulate_gradients_no_sync_grad_is_view",
        "test_accumulate_gradients_no_sync_allreduce_hook",
        "test_accumulate_gradients_no_sync_allreduce_with_then_hook", "test_get_future"],
    # The "gpu" feature: object collectives and DDP run on CPU tensors with
    # any backend but nccl; those of these tests that need CUDA devices skip
    # at run time, as they do for gloo here.
    "Test requires backend tutti to be one of {'nccl', 'ucc', 'gloo'}": [
        "test_all_gather_object_default_pg", "test_all_gather_object_subgroup", "test_broadcast_object_list",
        "test_compute_bucket_assignment_by_size_sparse_error_without_logger", "test_ddp_bucket_cap_mb_list",
        "test_ddp_build_debug_param_to_name_mapping", "test_ddp_control_flow_different_across_ranks",
        "test_ddp_control_flow_same_across_ranks", "test_ddp_device", "test_ddp_device_mesh_initialization",
        "test_ddp_forward_backward_hook", "test_ddp_ignore_params_arg", "test_ddp_model_diff_num_params_across_ranks",
        "test_ddp_multiple_nested_unused_params_err_ignore_params", "test_ddp_multiple_nested_unused_params_error",
        "test_ddp_namedtuple", "test_ddp_profiling_torch_profiler", "test_ddp_shared_grad_acc_unused_params",
        "test_ddp_unused_params_rebuild_buckets_exception", "test_different_graph_across_ranks", "test_gather_object",
        "test_gather_object_subgroup", "test_invalid_static_graph", "test_monitored_barrier_allreduce_hang",
        "test_monitored_barrier_allreduce_hang_wait_all_ranks", "test_skip_all_reduce_unused_parameters",
        "test_verify_model_across_rank_with_logger", "test_verify_model_across_rank_without_logger"],
    "Only MPI supports CPU all_to_all_single": [
        "test_all_to_all_single_equal_split", "test_all_to_all_single_equal_split_complex",
        "test_all_to_all_single_equal_split_full_group", "test_all_to_all_single_equal_split_group",
        "test_all_to_all_single_unequal_split", "test_all_to_all_single_unequal_split_complex",
        "test_all_to_all_single_unequal_split_full_group", "test_all_to_all_single_unequal_split_group"],
    "Only MPI supports all_to_all": [
        "test_all_to_all", "test_all_to_all_complex", "test_all_to_all_full_group", "test_all_to_all_group"],
}


def same_reason(a, b):
    """Skip reasons compare equal; the sets in require_backend's print in any order."""
    prefix = f"Test requires backend {args.backend} to be one of "
    if a and b and a.startswith(prefix) and b.startswith(prefix):
        return ast.literal_eval(a[len(prefix):]) == ast.literal_eval(b[len(prefix):])
    return a == b


def run_gated_tests():
    base = dt.DistributedTest._DistTestBase
    for reason, names in GATED_TESTS_TUTTI_RUNS.items():
        for name in names:
            fn = getattr(base, name, None)
            why = getattr(fn, "__unittest_skip_why__", None)
            if fn is None or not getattr(fn, "__unittest_skip__", False) or not same_reason(why, reason):
                raise SystemExit(f"run_suite.py: {name} is not gated by '{reason}' in this suite (found: {why!r})")
            del fn.__unittest_skip__
            del fn.__unittest_skip_why__


if args.backend == "tutti":
    run_gated_tests()


class TestDistBackendWithFork(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    if args.backend == "tutti":
        def _test_accumulate_gradients_no_sync(self, *a, **k):
            # The helper builds its CPU model only `if BACKEND == "mpi" or
            # BACKEND == "gloo"` (its other branch is CUDA): the CPU branch,
            # on the default group, which is tutti's.
            assert dist.get_backend() == "tutti"
            saved, dt.BACKEND = dt.BACKEND, "gloo"
            try:
                return super()._test_accumulate_gradients_no_sync(*a, **k)
            finally:
                dt.BACKEND = saved


def blocked_at(fn, m):
    """Whether a test's world-size gates (its decorators, as written in the
    suite's source) keep it from running on m ranks."""
    src = inspect.getsource(inspect.unwrap(fn))
    head = src[:src.index("def ")]
    if "skip_if_small_worldsize" in head and m < 8:
        return True
    if "skip_if_odd_worldsize" in head and m % 2 == 1:
        return True
    if any(m < int(k) for k in re.findall(r"@require_world_size\((\d+)\)", head)):
        return True
    return any(m != int(k) for k in re.findall(r"@require_exact_world_size\((\d+)\)", head))


# The sizes the test command runs every test at; --world-size-gated at a
# larger size runs the tests those sizes could not.
EVERY_TEST_SIZES = (2, 3)


def world_size_gated(fn, n):
    """Whether a test runs on n ranks but on none of the smaller sizes the
    test command runs (2, 3, and 4 for n above 4)."""
    smaller = [m for m in EVERY_TEST_SIZES + (4,) if m < n]
    return not blocked_at(fn, n) and all(blocked_at(fn, m) for m in smaller)


class Recorder(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}
        self.known = []
        self._t0 = {}

    def _name(self, test):
        return test.id().split(".")[-1]

    def startTest(self, test):
        self._t0[self._name(test)] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        name = self._name(test)
        took = time.monotonic() - self._t0.get(name, time.monotonic())
        self.outcomes[name] = {"outcome": outcome, "seconds": round(took, 2), "detail": detail}
        print(f"{outcome:5} {took:6.1f}s {name}" + (f"  ({detail})" if outcome in ("SKIP", "KNOWN") else ""),
              flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        if self._name(test) in TORCH_DEFECTS:
            self.failures.append((test, "passed: TORCH_DEFECTS lists it as failing for torch's defect"))
            self._record(test, "FAIL", "passed, but TORCH_DEFECTS says it fails: the defect is mended?")
            return
        self._record(test, "PASS")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "SKIP", reason)

    def _failed(self, test, err):
        detail = self._exc_info_to_string(err, test)
        defect = TORCH_DEFECTS.get(self._name(test))
        if defect and defect[1] in detail:
            self.known.append(test)
            self._record(test, "KNOWN", defect[0])
            return True
        return False

    def addFailure(self, test, err):
        if not self._failed(test, err):
            super().addFailure(test, err)
            self._record(test, "FAIL", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        if not self._failed(test, err):
            super().addError(test, err)
            self._record(test, "FAIL", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "XFAIL")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "FAIL", "unexpected success")


def main():
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithFork)
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    if args.world_size_gated:
        names = [n for n in names if world_size_gated(getattr(TestDistBackendWithFork, n), args.world_size)]
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithFork(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=0, stream=open(os.devnull, "w"))
    t0 = time.monotonic()
    result = runner.run(suite)
    counts = {}
    for o in result.outcomes.values():
        counts[o["outcome"]] = counts.get(o["outcome"], 0) + 1
    print(f"backend {args.backend}, world size {args.world_size}: "
          + ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items()))
          + f" in {time.monotonic() - t0:.0f} s")
    for name, o in result.outcomes.items():
        if o["outcome"] == "FAIL":
            print(f"==== FAIL {name}\n{o['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "world_size": args.world_size, "tests": result.outcomes}, f, indent=1)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
