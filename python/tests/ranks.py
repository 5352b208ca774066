"""Starting the ranks of a multi-rank test: one subprocess per rank of a
worker script, with RANK, WORLD_SIZE, MASTER_ADDR and a free MASTER_PORT.
Every rank is killed when the test's time is up or soon after one rank
failed, so that nothing outlives the test."""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The package under test: build/python (TUTTI_PYTHONPATH overrides).
PYTHONPATH = os.environ.get("TUTTI_PYTHONPATH") or os.path.join(os.path.dirname(os.path.dirname(HERE)), "build",
                                                                 "python")
PYTHON = sys.executable


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Flight-recorder dumps of the failure tests go to a directory of this
# session, removed at its end (not to /tmp).
TRACE_DIR = tempfile.mkdtemp(prefix="tutti-pytest-traces-")
atexit.register(shutil.rmtree, TRACE_DIR, True)


def child_env(extra=None):
    env = dict(os.environ)
    env.setdefault("TUTTI_TRACE_DIR", TRACE_DIR)
    env["PYTHONPATH"] = PYTHONPATH + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


class Result:
    def __init__(self, codes, outs, errs):
        self.codes, self.outs, self.errs = codes, outs, errs

    def report(self):
        lines = []
        for r, (c, o, e) in enumerate(zip(self.codes, self.outs, self.errs)):
            lines.append(f"--- rank {r}: exit {c}\n{o[-4000:]}\n--- rank {r} stderr:\n{e[-4000:]}")
        return "\n".join(lines)

    def check(self):
        assert all(c == 0 for c in self.codes), self.report()
        return self


def run_ranks(n, script, args=(), timeout=120, env=None, grace=5.0):
    """Runs `script` (a file in this directory) as n ranks; returns a Result
    with every rank's exit code, stdout and stderr."""
    port = str(free_port())
    procs = []
    outs = [None] * n
    for r in range(n):
        e = child_env(env)
        e.update(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, script), *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    return collect(procs, timeout, grace)


def run_command(cmd, timeout=120, env=None):
    """Runs one process (which may start others in its session); returns a Result of one."""
    p = subprocess.Popen(cmd, env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    return collect([p], timeout, 0.0)


def collect(procs, timeout, grace):
    import threading
    n = len(procs)
    outs, errs = [""] * n, [""] * n

    def reader(i):
        o, e = procs[i].communicate()
        outs[i], errs[i] = o, e

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    kill_at = None
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if kill_at is None and any(p.poll() not in (None, 0) for p in procs):
                kill_at = now + grace  # a moment for the others to report the failure
            if now >= end or (kill_at is not None and now >= kill_at):
                break
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the rank and anything it started
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait()
        for t in threads:
            t.join(10)
    codes = [p.returncode for p in procs]
    if time.monotonic() >= end:
        errs = [e + f"\n[killed: the test's {timeout} s were up]" for e in errs]
    return Result(codes, outs, errs)
