#!/usr/bin/env python3
"""Multi-host checks on the test-bed. Run inside `netbed.sh run K -- ...`,
which sets NETBED_HOSTS, NETBED_MASTER and NETBED_PREFIX:

  check_netbed.py launch    --tuttirun T           environment, failure, Ctrl-C
  check_netbed.py seed-tour --tuttirun T --tour S  seed tour, hosts seen, TUTTI_SOCKET_IFNAME
  check_netbed.py suite     --tuttirun T --suite X correctness suite; shared memory inside hosts;
                                                   the two-level all_reduce's leader limit
  check_netbed.py survive   --tuttirun T --suite X a host's ranks killed: the others shrink and go on
  check_netbed.py rate      --rate-mbit M          the links are shaped to M Mbit/s

Every job runs with a timeout; no process may be left in the hosts after it.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

PER_HOST = 2


def fail(msg, out=None):
    if out is not None:
        print("--- stdout:\n" + out.stdout + "--- stderr:\n" + out.stderr)
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def bed():
    try:
        hosts = os.environ["NETBED_HOSTS"].split(",")
        return hosts, os.environ["NETBED_MASTER"], os.environ["NETBED_PREFIX"]
    except KeyError:
        fail("run me inside 'netbed.sh run K -- ...'")


def host_pids(host):
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True)
    return out.stdout.split()


def expect_hosts_empty(hosts, limit=5.0):
    deadline = time.time() + limit
    while True:
        left = {h: host_pids(h) for h in hosts}
        left = {h: p for h, p in left.items() if p}
        if not left:
            return
        if time.time() > deadline:
            fail(f"processes left in the hosts after the job: {left}")
        time.sleep(0.05)


def tuttirun_cmd(args, extra=(), per_host=PER_HOST, seconds=100):
    hosts, master, prefix = bed()
    return [args.tuttirun, "--hosts", ",".join(f"{h}:{per_host}" for h in hosts), "--exec-prefix", prefix,
            "--master-addr", master, "--timeout", str(seconds), *extra]


def run(cmd, env_add=None, timeout=150):
    env = dict(os.environ)
    env.update(env_add or {})
    start = time.time()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        fail("timed out: " + " ".join(cmd))
    out.seconds = time.time() - start
    return out


def check_launch(args):
    hosts, _, _ = bed()
    n = len(hosts) * PER_HOST
    # 1. Every rank's environment, its host and the job secret.
    script = ('echo "R=$RANK L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE W=$WORLD_SIZE G=$GROUP_RANK '
              'M=$MASTER_ADDR:$MASTER_PORT H=$(hostname) S=$TUTTI_JOB_SECRET"')
    out = run(tuttirun_cmd(args, ["--master-port", "29411"]) + ["sh", "-c", script])
    if out.returncode != 0:
        fail(f"environment job exited with {out.returncode}", out)
    seen, secrets = {}, set()
    for line in out.stdout.splitlines():
        m = re.fullmatch(r"R=(\d+) L=(\d+) LW=(\d+) W=(\d+) G=(\d+) M=(\S+) H=(\S+) S=(\S*)", line)
        if not m:
            continue
        r, l, lw, w, g = (int(m[i]) for i in range(1, 6))
        want = (r % PER_HOST, PER_HOST, n, r // PER_HOST, "198.18.0.1:29411", hosts[r // PER_HOST])
        if (l, lw, w, g, m[6], m[7]) != want:
            fail(f"rank {r}: got {(l, lw, w, g, m[6], m[7])}, expected {want}", out)
        seen[r] = True
        secrets.add(m[8])
    if sorted(seen) != list(range(n)):
        fail(f"ranks reported: {sorted(seen)}, expected 0..{n - 1}", out)
    if len(secrets) != 1 or not re.fullmatch(r"[0-9a-f]{64}", next(iter(secrets))):
        fail(f"every rank must get the same 64-hex-digit TUTTI_JOB_SECRET, got {secrets}", out)
    expect_hosts_empty(hosts)
    print(f"environment: {n} ranks on {len(hosts)} hosts as expected, one job secret")

    # 2. A secret set by the caller is kept.
    out = run(tuttirun_cmd(args) + ["sh", "-c", 'echo "S=$TUTTI_JOB_SECRET"'], {"TUTTI_JOB_SECRET": "ab" * 32})
    if out.returncode != 0 or sorted(set(re.findall(r"S=(\S+)", out.stdout))) != ["ab" * 32]:
        fail("the caller's TUTTI_JOB_SECRET must reach every rank", out)

    # 3. One rank fails: all hosts stop, one line names the host, rank and code.
    bad = n - 3
    bad_host = hosts[bad // PER_HOST]
    script = f'if [ "$RANK" = {bad} ]; then sleep 0.3; exit 3; fi; exec sleep 60'
    out = run(tuttirun_cmd(args, ["--kill-grace", "1"]) + ["sh", "-c", script])
    if out.returncode != 3:
        fail(f"failure job exited with {out.returncode}, expected 3", out)
    node = bad // PER_HOST
    want = (rf"tuttirun: host {re.escape(bad_host)} \(node {node}, ranks {node * PER_HOST}-{node * PER_HOST + 1}\): "
            rf"rank {bad} \(pid \d+\) exited with code 3; stopping the other {len(hosts) - 1} hosts")
    if not any(re.fullmatch(want, l) for l in out.stderr.splitlines()):
        fail("no line naming the failed host and rank: " + want, out)
    if out.seconds > 20:
        fail(f"stopping the job took {out.seconds:.1f} s", out)
    expect_hosts_empty(hosts)
    print(f"failure: rank {bad} on {bad_host} failed; all stopped in {out.seconds:.1f} s, exit code 3")

    # 4. A rank killed by a signal.
    script = f'if [ "$RANK" = 1 ]; then sleep 0.3; kill -9 $$; fi; exec sleep 60'
    out = run(tuttirun_cmd(args, ["--kill-grace", "1"]) + ["sh", "-c", script])
    if out.returncode != 128 + 9 or not re.search(
            rf"tuttirun: host {re.escape(hosts[0])} \(node 0, ranks 0-1\): rank 1 \(pid \d+\) killed by signal 9 "
            rf"\(SIGKILL\); stopping", out.stderr):
        fail(f"killed rank: exit {out.returncode}", out)
    expect_hosts_empty(hosts)

    # 5. A program missing on the hosts.
    out = run(tuttirun_cmd(args) + ["/nonexistent/program"])
    if out.returncode != 127 or "cannot execute '/nonexistent/program'" not in out.stderr:
        fail(f"missing program: exit {out.returncode}", out)
    expect_hosts_empty(hosts)

    # 6. Ctrl-C stops every host's ranks.
    env = dict(os.environ)
    p = subprocess.Popen(tuttirun_cmd(args, ["--kill-grace", "1"]) + ["sh", "-c", 'echo "up $RANK"; exec sleep 60'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    up = 0
    deadline = time.time() + 30
    while up < n and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        up += line.startswith("up ")
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("tuttirun did not stop after SIGINT")
    if up != n or p.returncode not in (-signal.SIGINT, 130):
        fail(f"Ctrl-C: {up} ranks came up, exit {p.returncode}\n{err}")
    expect_hosts_empty(hosts)
    print(f"Ctrl-C: {n} ranks stopped")


def joined_hosts(stderr):
    """{rank: number of hosts} from the 'joined: rank R of N on H host(s)' lines."""
    return {int(m[1]): int(m[3]) for m in re.finditer(r"joined: rank (\d+) of (\d+) on (\d+) host", stderr)}


def check_seed_tour(args):
    import check_seed_tour  # tests/examples: the tutorial's values
    hosts, _, _ = bed()
    n = len(hosts) * PER_HOST
    for label, env in [("default interface", {}), ("TUTTI_SOCKET_IFNAME=eth0", {"TUTTI_SOCKET_IFNAME": "eth0"}),
                       ("TUTTI_SOCKET_IFNAME=^lo", {"TUTTI_SOCKET_IFNAME": "^lo"})]:
        env = dict(env, TUTTI_LOG="info")
        out = run(tuttirun_cmd(args, ["--tag-output"]) + [args.tour], env)
        if out.returncode != 0:
            fail(f"seed tour ({label}) exited with {out.returncode}", out)
        got = {}
        for line in out.stdout.splitlines():
            m = re.match(r"\[(\d+)\] (\w+)\s+Rank (\d+) has data (.*)$", line)
            if m and int(m[1]) == int(m[3]):
                got[(int(m[3]), m[2])] = m[4]
        bad = [(r, e, got.get((r, e)), w) for r in range(n) for e, w in check_seed_tour.expected(r, n).items()
               if got.get((r, e)) != w]
        if bad:
            fail(f"seed tour ({label}): wrong lines {bad[:5]}", out)
        seen = joined_hosts(out.stderr)
        if seen != {r: len(hosts) for r in range(n)}:
            fail(f"seed tour ({label}): every rank must join on {len(hosts)} hosts, got {seen}", out)
        expect_hosts_empty(hosts)
        print(f"seed tour ({label}): {len(got)} lines as the tutorial says; {n} ranks on {len(hosts)} hosts")

    # An interface no host has: refused at init, naming the variable and the
    # interfaces there are.
    out = run(tuttirun_cmd(args, ["--kill-grace", "1"]) + [args.tour], {"TUTTI_SOCKET_IFNAME": "=ib9"})
    if out.returncode == 0 or "TUTTI_SOCKET_IFNAME='=ib9' matches no interface that is up" not in out.stderr \
            or "eth0 198.18.0." not in out.stderr:
        fail(f"TUTTI_SOCKET_IFNAME=ib9 must fail at init (exit {out.returncode})", out)
    expect_hosts_empty(hosts)
    print(f"TUTTI_SOCKET_IFNAME=ib9: refused in {out.seconds:.1f} s")


SUITE_ENV = {
    # Small chunks and thresholds, so small counts cross chunk and round
    # boundaries (the suite's kChunkBytes is 256).
    "TUTTI_CHUNK_BYTES": "256", "TUTTI_SMALL_BYTES": "64", "TUTTI_SHM_SLOT_BYTES": "256",
    "TUTTI_SHM_ONESHOT_BYTES": "64", "TUTTI_TIMEOUT": "60",
}


def check_suite(args):
    hosts, _, _ = bed()
    n = len(hosts) * PER_HOST
    # The whole suite in one job: about a minute alone, up to twice that
    # beside the other netbed tests on two cores.
    out = run(tuttirun_cmd(args, ["--tag-output"], seconds=180) + [args.suite], SUITE_ENV, timeout=240)
    if out.returncode != 0:
        fail(f"suite exited with {out.returncode}", out)
    passed = re.findall(r"^\[(\d+)\] \[  PASSED  \] (\d+) tests?", out.stdout, re.M)
    if sorted(int(r) for r, _ in passed) != list(range(n)):
        fail(f"every rank must pass every test; PASSED lines from {passed}", out)
    for line in out.stdout.splitlines():
        if line.startswith("[0] netbed:"):
            print(line[4:])
    expect_hosts_empty(hosts)
    print(f"suite: {passed[0][1]} tests passed on each of {n} ranks in {out.seconds:.1f} s")

    # Inside a host, shared memory: every rank maps a segment for its host's
    # communicator (2 ranks), none for one that spans hosts.
    env = dict(SUITE_ENV, TUTTI_LOG="debug")
    out = run(tuttirun_cmd(args) + [args.suite, "--gtest_filter=Netbed.RanksKnowTheirHosts:Netbed.EveryCollectiveOnSubgroups"],
              env, timeout=200)
    if out.returncode != 0:
        fail(f"suite (shared memory check) exited with {out.returncode}", out)
    mapped = re.findall(r"rank (\d+) pid \d+ DEBUG\] mapped shared memory segment \S+ \d+ bytes for (\d+) ranks",
                        out.stderr)
    ranks_mapping = {int(r) for r, size in mapped if int(size) == PER_HOST}
    wider = [m for m in mapped if int(m[1]) != PER_HOST]
    if ranks_mapping != set(range(n)) or wider:
        fail(f"shared memory inside hosts only: ranks that mapped a host segment {sorted(ranks_mapping)}, "
             f"segments of other sizes {wider[:4]}", out)
    expect_hosts_empty(hosts)
    print(f"shared memory: every rank mapped its host's segment ({PER_HOST} ranks); none spans hosts")
    check_leader_cut(args, hosts, n, 128 << 10, {})
    check_leader_cut(args, hosts, n, 1 << 20, {"TUTTI_TWO_LEVEL_LEADER_BYTES": "1M"})


def check_survive(args):
    hosts, _, _ = bed()
    n = len(hosts) * PER_HOST
    survivors = n - PER_HOST
    kill_file = f"/tmp/tutti-netbed-kill-{os.getpid()}"
    env = dict(SUITE_ENV, TUTTI_NETBED_KILL_FILE=kill_file)
    try:
        out = run(tuttirun_cmd(args, ["--tag-output", "--keep-going"]) + [args.suite, "--survive"], env, timeout=200)
    finally:
        if os.path.exists(kill_file):
            os.unlink(kill_file)
    if out.returncode != 128 + signal.SIGKILL:
        fail(f"the job must end with its first failure, the kill (exit {128 + signal.SIGKILL}), not {out.returncode}", out)
    passed = sorted(int(r) for r in re.findall(r"^\[(\d+)\] \[  PASSED  \] 1 test", out.stdout, re.M))
    if passed != list(range(survivors)):
        fail(f"every survivor (ranks 0-{survivors - 1}) must pass; PASSED from {passed}", out)
    times = [float(t) for t in re.findall(r"shrunk (\d+) ms after the kill", out.stdout)]
    print("\n".join(l for l in out.stdout.splitlines() if "survive:" in l))
    expect_hosts_empty(hosts)
    print(f"survive: the {PER_HOST} ranks of {hosts[-1]} killed; {survivors} survivors shrank to a two-level "
          f"communicator of {len(hosts) - 1} hosts in {min(times):.0f}-{max(times):.0f} ms after the kill and "
          f"passed the collective sweep on it")


LEADER_CUT = re.compile(r"rank (\d+) pid \d+ DEBUG\] two-level collectives on \d+ hosts x \d+ ranks: "
                        r"all_reduce through one leader per host up to (\d+) bytes")


def check_leader_cut(args, hosts, n, want, env_add):
    """The two-level all_reduce on both sides of its leader form's limits
    (64 KiB by default, TUTTI_TWO_LEVEL_LEADER_BYTES): every rank passes, and
    every rank used the same limit."""
    what = " ".join(f"{k}={v}" for k, v in env_add.items()) or "default"
    env = dict(env_add, TUTTI_LOG="debug", TUTTI_TIMEOUT="60")
    out = run(tuttirun_cmd(args, ["--tag-output"]) + [args.suite, "--gtest_filter=Netbed.TwoLevelAllReduceAroundTheLeaderCut"],
              env, timeout=200)
    if out.returncode != 0:
        fail(f"suite (leader cut, {what}) exited with {out.returncode}", out)
    passed = re.findall(r"^\[(\d+)\] \[  PASSED  \] 1 test", out.stdout, re.M)
    if sorted(int(r) for r in passed) != list(range(n)):
        fail(f"leader cut ({what}): every rank must pass; PASSED lines from {passed}", out)
    found = LEADER_CUT.findall(out.stderr)
    ranks = sorted(int(r) for r, _ in found)
    cuts = {int(c) for _, c in found}
    if ranks != list(range(n)) or cuts != {want}:
        fail(f"leader cut ({what}): every rank must use the leader form up to {want} bytes; "
             f"ranks {ranks}, limits {sorted(cuts)}", out)
    expect_hosts_empty(hosts)
    print(f"leader cut ({what}): every rank passed, the leader form up to {want} bytes")


def check_rate(args):
    """Two hosts: h1 sends 2 MB to h0 over TCP; at M Mbit/s that takes at
    least 2e6*8/(M*1e6) s (less 10% for the token bucket's burst)."""
    hosts, master, prefix = bed()
    nbytes = 2_000_000
    server = ("import socket,sys\n"
              "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              f"s.bind(('{master}', 29412)); s.listen(1); s.settimeout(20); print('ready', flush=True)\n"
              "c,_=s.accept(); c.settimeout(20); n=0\n"
              f"while n < {nbytes}:\n"
              "    b=c.recv(1<<16)\n"
              "    if not b: break\n"
              "    n+=len(b)\n"
              "c.sendall(b'k'); print(n, flush=True)\n")
    client = ("import socket,time\n"
              f"s=socket.create_connection(('{master}', 29412), timeout=20); t=time.time()\n"
              f"s.sendall(b'x'*{nbytes}); s.recv(1); print('%.3f' % (time.time()-t))\n")
    base = prefix.replace("{host}", "%s").split()
    srv = subprocess.Popen([w % hosts[0] if "%s" in w else w for w in base] + ["python3", "-c", server],
                           stdout=subprocess.PIPE, text=True)
    try:
        if srv.stdout.readline().strip() != "ready":
            fail("rate: the receiver did not start")
        out = subprocess.run([w % hosts[1] if "%s" in w else w for w in base] + ["python3", "-c", client],
                             capture_output=True, text=True, timeout=60)
        got = srv.stdout.readline().strip()
        srv.wait(timeout=20)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    if out.returncode != 0 or got != str(nbytes):
        fail(f"rate: transfer failed (client exit {out.returncode}, received {got!r})\n{out.stderr}")
    seconds = float(out.stdout.strip())
    least = nbytes * 8 / (args.rate_mbit * 1e6) * 0.9
    if seconds < least:
        fail(f"rate: 2 MB took {seconds:.2f} s; at {args.rate_mbit} Mbit/s it takes at least {least:.2f} s")
    if seconds > least * 4 + 2:
        fail(f"rate: 2 MB took {seconds:.2f} s, far slower than {args.rate_mbit} Mbit/s")
    expect_hosts_empty(hosts)
    print(f"rate: 2 MB in {seconds:.2f} s at {args.rate_mbit} Mbit/s "
          f"({nbytes * 8 / seconds / 1e6:.1f} Mbit/s measured)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["launch", "seed-tour", "suite", "survive", "rate"])
    p.add_argument("--tuttirun")
    p.add_argument("--tour")
    p.add_argument("--suite")
    p.add_argument("--rate-mbit", type=float, default=0)
    args = p.parse_args()
    {"launch": check_launch, "seed-tour": check_seed_tour, "suite": check_suite, "survive": check_survive,
     "rate": check_rate}[args.what](args)


if __name__ == "__main__":
    main()
