"""forestcc-run: environment, labels, whole-line output, failure handling, Ctrl-C, a killed
launcher, usage errors, the shared-memory sweep."""
import ast
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from conftest import JOB_TIMEOUT, PROGRAMS, clean_env, run_job

LAUNCHER = [sys.executable, "-m", "forestcc.launcher"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _children(pid: int) -> set[int]:
    """Direct children of `pid` (this test's own process tree, not the whole machine)."""
    out = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.add(int(entry))
    return out


def _wait_gone(pids, timeout: float = JOB_TIMEOUT) -> set[int]:
    """The pids still alive after waiting up to `timeout` (generous: only ends a hang)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = {p for p in pids if _alive(p)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _segments(prefix: str) -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(prefix + "-")}


def test_rank_environment_and_labels():
    code = ("import os; print('ENV', os.environ['FORESTCC_RANK'], os.environ['FORESTCC_SIZE'], "
            "os.environ['FORESTCC_LOCAL_RANK'], os.environ['FORESTCC_ROOT_ADDR'] != '')")
    p = subprocess.run([*LAUNCHER, "-n", "3", "--label", "--", sys.executable, "-c", code],
                       env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [f"[{r}] ENV {r} 3 {r} True" for r in range(3)]


def _expected_lines(ranks: int, count: int) -> tuple[Counter, Counter]:
    """What tests/programs/launcher_lines.py writes (keep in step with its line())."""
    def line(rank, phase, stream, i):
        return f"{rank}:{phase}:{stream}:{i}:" + chr(65 + rank % 26) * (1000 + 37 * i % 4000)

    out, err = Counter(), Counter()
    for r in range(ranks):
        out.update(line(r, "b", "out", i) for i in range(20))
        out.update(line(r, "f", "out", i) for i in range(count))
        err.update(line(r, "f", "err", i) for i in range(0, count, 4))
        out[f"END {r}"] += 1  # written without a newline: forestcc-run ends it
    return out, err


@pytest.mark.parametrize("label", [False, True])
def test_output_comes_out_in_whole_lines(label):
    """Ranks write long lines in several unbuffered writes each; half of the first lines are
    written while every other rank waits in a barrier with its own line half written, so relaying
    bytes as they come cuts each of those lines. Every line must come out whole."""
    ranks, count = 4, 2000  # 8,000 stdout lines of 1-5 KB, as in the report
    p = subprocess.run([*LAUNCHER, "-n", str(ranks), *(["--label"] if label else []),
                        sys.executable, str(PROGRAMS / "launcher_lines.py"), str(count)],
                       env=clean_env(PYTHONUNBUFFERED="1"), capture_output=True,
                       timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stderr[-2000:]
    want_out, want_err = _expected_lines(ranks, count)
    for data, want in ((p.stdout, want_out), (p.stderr, want_err)):
        assert data.endswith(b"\n")
        got = Counter()
        for ln in data.decode().split("\n")[:-1]:
            if label:
                tag, _, ln = ln.partition("] ")
                rank = ln.split(":")[0].split()[-1]
                assert tag == f"[{rank}", f"label {tag}] on a line of rank {rank}"
            got[ln] += 1
        cut = sorted((got - want).keys())
        missing = sorted((want - got).keys())
        assert not cut and not missing, (
            f"{len(cut)} lines that were not written (cut or glued), e.g. "
            f"{[c[:80] for c in cut[:3]]}; {len(missing)} lines missing")


def test_failing_rank_stops_the_others_and_is_named():
    t0 = time.monotonic()
    res = run_job(3, "exit_code.py", "7")
    assert res.returncode == 7
    assert "forestcc-run: rank 1 (pid" in res.stderr and "exited with code 7" in res.stderr
    assert "stopping rank(s) 0, 2" in res.stderr
    assert time.monotonic() - t0 < 200  # the sleepers (600 s) were stopped, not waited for


def _start_and_read(program: str, *args: str, n: int = 3, launcher_args=(), tag: str):
    """Starts a job, returns the launcher and the first line of each rank that starts with
    `tag` (after the label)."""
    p = subprocess.Popen([*LAUNCHER, "-n", str(n), "--label", *launcher_args,
                          sys.executable, str(PROGRAMS / program), *args],
                         env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    lines = []
    while len(lines) < n:  # wait until every rank runs
        line = p.stdout.readline()
        if not line:
            p.wait(timeout=JOB_TIMEOUT)
            pytest.fail(f"forestcc-run ended early: {p.stderr.read()}")
        if line.split("] ", 1)[-1].startswith(tag):
            lines.append(line.split("] ", 1)[-1].split())
    return p, lines


def test_ctrl_c_stops_all_ranks():
    p, lines = _start_and_read("exit_code.py", "sleep", tag="started")
    pids = [int(words[2].split("=")[1]) for words in lines]  # started rank=R pid=P
    assert set(pids) <= _children(p.pid)
    try:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=JOB_TIMEOUT)
        assert p.returncode == 130
        assert "received SIGINT; stopping all ranks" in err
        assert not any(_alive(pid) for pid in pids)
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_ranks_and_their_children_die_with_a_killed_launcher():
    """SIGKILL leaves forestcc-run no chance to stop anything: the ranks (their own session,
    so not in forestcc-run's process group) and what they started must still go, and the
    shared memory of the ranks killed that way must be swept."""
    prefix = f"fccl{uuid.uuid4().hex[:12]}"
    p, lines = _start_and_read("launcher_family.py", "shm", tag="FAMILY",
                               launcher_args=("--env", f"FORESTCC_SHM_PREFIX={prefix}"))
    ranks = {int(words[2]) for words in lines}  # FAMILY rank pid child
    family = ranks | {int(words[3]) for words in lines}
    helpers = _children(p.pid) - ranks  # forestcc-run's watchdog: it sweeps, so wait for it too
    assert ranks <= _children(p.pid) and _segments(prefix)
    try:
        p.kill()
        p.wait(timeout=JOB_TIMEOUT)
        left = _wait_gone(family | helpers)
        assert not left & family, f"still running after forestcc-run was killed: {left}"
        assert not left, f"forestcc-run's helper still running: {left}"
        assert not _segments(prefix), "segments of the killed ranks were not swept"
    finally:
        for pid in family | helpers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for name in _segments(prefix):
            os.unlink(f"/dev/shm/{name}")
        p.stdout.close()
        p.stderr.close()


def test_sweep_uses_the_ranks_shm_prefix():
    """A rank killed by SIGKILL leaves its segment; forestcc-run sweeps those named with the
    prefix the ranks were given (--env), not its own (the default)."""
    prefix = f"fccl{uuid.uuid4().hex[:12]}"
    try:
        res = run_job(1, "shm_crash.py", "sigkill",
                      launcher_args=("--env", f"FORESTCC_SHM_PREFIX={prefix}"))
        assert res.returncode == 137, res.stderr
        assert "was killed by signal 9 (SIGKILL)" in res.stderr
        assert not _segments(prefix)
    finally:
        for name in _segments(prefix):
            os.unlink(f"/dev/shm/{name}")


@pytest.mark.parametrize("args, message", [
    (["-n", "2"], "no command given"),
    (["-n", "0", "true"], "-n must be between 1 and 1024 (ranks on this machine), got 0"),
    (["-n", "-3", "true"], "-n must be between 1 and 1024 (ranks on this machine), got -3"),
    (["-n", "100000", "true"], "-n must be between 1 and 1024 (ranks on this machine), got 100000"),
    (["-n", "1", "--grace", "-1", "true"], "--grace must be a number of seconds >= 0, got -1"),
    (["-n", "1", "--grace", "nan", "true"], "--grace must be a number of seconds >= 0, got nan"),
    (["-n", "1", "--grace", "inf", "true"], "--grace must be a number of seconds >= 0, got inf"),
])
def test_usage_errors(args, message):
    p = subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_bind_core_puts_each_rank_on_its_own_cpu():
    # rank r on CPU r of the launcher's own (all of a rank's threads: the mask is inherited);
    # without --bind each rank may run on all of them
    cpus = sorted(os.sched_getaffinity(0))
    n = min(2, len(cpus))
    code = "import os; print('CPUS', os.environ['FORESTCC_RANK'], sorted(os.sched_getaffinity(0)))"
    for bind, want in (("core", {r: [cpus[r]] for r in range(n)}), ("none", {r: cpus for r in range(n)})):
        p = subprocess.run([*LAUNCHER, "-n", str(n), "--bind", bind, "--", sys.executable, "-c", code],
                           env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
        assert p.returncode == 0, p.stderr
        got = {int(line.split()[1]): ast.literal_eval(line.split(" ", 2)[2]) for line in p.stdout.splitlines()}
        assert got == want, (bind, p.stdout)
    # more ranks than CPUs: refused, naming both counts
    p = subprocess.run([*LAUNCHER, "-n", str(len(cpus) + 1), "--bind", "core", "true"],
                       capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 2, p.stderr
    assert f"--bind core: {len(cpus) + 1} ranks on this machine but forestcc-run may use only {len(cpus)} CPUs" in p.stderr


def test_program_that_cannot_start():
    p = subprocess.run([*LAUNCHER, "-n", "1", "/nonexistent/program"], capture_output=True,
                       text=True, timeout=JOB_TIMEOUT)
    assert p.returncode != 0 and "cannot start" in p.stderr
    assert "No such file or directory" in p.stderr


# --- across hosts: the host list, placement, the ssh command line (no hosts needed) -----------

def test_host_list_and_placement(tmp_path):
    from forestcc.launch_hosts import HostSlots, Placement, parse_hosts, place, read_hostfile
    assert parse_hosts("a:2,b,[fd00::1]:3") == [HostSlots("a", 2), HostSlots("b", 1),
                                                 HostSlots("fd00::1", 3)]
    assert parse_hosts("a:1,b:2,a:1") == [HostSlots("a", 2), HostSlots("b", 2)]  # merged
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode1 slots=2\nnode2:3  # a comment\n\nnode3\n")
    assert read_hostfile(str(hostfile)) == [HostSlots("node1", 2), HostSlots("node2", 3),
                                            HostSlots("node3", 1)]
    hosts = [HostSlots("a", 2), HostSlots("b", 2)]
    assert place(hosts, None) == [Placement(0, "a", 0, 2), Placement(1, "a", 1, 2),
                                  Placement(2, "b", 0, 2), Placement(3, "b", 1, 2)]
    assert place(hosts, 3)[2:] == [Placement(2, "b", 0, 1)]  # local size counts placed ranks


def test_remote_command_carries_the_environment_through_a_shell():
    """What ssh sends is run by a remote shell: every value must come out as it went in."""
    from forestcc.launch_starters import remote_command
    env = {"FORESTCC_RANK": "3", "ODD": "it's $HOME `x` \"q\" \\ ;&|"}
    cmd = [sys.executable, "-c", "import os, sys; print(os.environ['ODD'], sys.argv[1:])",
           "a b", "$c"]

    def remote(line: str) -> subprocess.Popen:
        # stdin stays open, as forestcc-run holds the ssh channel's: its end stops the rank.
        return subprocess.Popen(["sh", "-c", line], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    p = remote(remote_command(cmd, env, "/"))
    out = p.stdout.read()
    assert p.wait(timeout=JOB_TIMEOUT) == 0, p.stderr.read()
    assert out == f"{env['ODD']} ['a b', '$c']\n"
    failing = remote(remote_command(["sh", "-c", "exit 5"], {}, None))
    assert failing.wait(timeout=JOB_TIMEOUT) == 5  # the rank's exit status comes back
    # The channel's end (forestcc-run or ssh gone) stops the rank.
    sleeper = remote(remote_command(["sleep", "600"], {}, None))
    sleeper.stdin.close()
    assert sleeper.wait(timeout=JOB_TIMEOUT) == 128 + signal.SIGTERM
    for q in (p, failing, sleeper):
        q.stdout.close()
        q.stderr.close()


def test_ssh_command_line(tmp_path):
    """--launcher ssh runs `<ssh> HOST <remote command>`: a stand-in ssh records its arguments
    and runs the remote command here."""
    fake = tmp_path / "fake-ssh"
    log = tmp_path / "calls"
    fake.write_text(f"#!/bin/sh\n"
                    f"case \"$4\" in *FORESTCC_RANK=*) ;; *) exit 99;; esac\n"
                    f"echo \"$1 $2 $3 $#\" >> {log}\n"
                    f"shift 3\n"
                    f"exec sh -c \"$*\"\n")
    fake.chmod(0o755)
    p = subprocess.run([*LAUNCHER, "--hosts", "nodeA:2,nodeB", "--ssh", f"{fake} -o X=1",
                        "--port", "23456", "--label", "--env", "EXTRA=yes", "--", sys.executable,
                        "-c", "import os; e = os.environ; print(e['FORESTCC_RANK'], "
                        "e['FORESTCC_LOCAL_RANK'], e['FORESTCC_LOCAL_SIZE'], "
                        "e['FORESTCC_ROOT_ADDR'], e['EXTRA'], 'FORESTCC_ROOT_FD' in e)"],
                       env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == ["[0] 0 0 2 nodeA:23456 yes False",
                                             "[1] 1 1 2 nodeA:23456 yes False",
                                             "[2] 2 0 1 nodeA:23456 yes False"]
    calls = log.read_text().splitlines()
    # ssh's options, the host, and the remote command as one word (ssh joins words with spaces).
    assert sorted(calls) == ["-o X=1 nodeA 4", "-o X=1 nodeA 4", "-o X=1 nodeB 4"]


@pytest.mark.parametrize("args, message", [
    (["--launcher", "ssh", "true"], "--launcher need --hosts or --hostfile"),
    (["--port", "80", "true"], "--port need --hosts or --hostfile"),
    (["true"], "give the number of ranks (-n) or the hosts (--hosts, --hostfile)"),
    (["--hosts", "a:2,b:2", "-n", "5", "true"], "-n 5 does not fit the hosts' 4 slot(s)"),
    (["--hosts", "a:0", "true"], "has no slots"),
    (["--hosts", "a:x", "true"], "is not HOST or HOST:SLOTS"),
    (["--hostfile", "/nonexistent/hosts", "true"], "No such file"),
    (["--hosts", "a", "--launcher", "cluster", "true"], "--launcher cluster needs --cluster"),
    (["--hosts", "a", "--cluster", "fccnothere", "true"], "no emulated cluster 'fccnothere'"),
    (["--hosts", "a", "--port", "70000", "true"], "--port must be between 1 and 65535"),
    (["--hosts", "a", "--ssh", "true", "--bind", "core", "true"], "with ssh the ranks run elsewhere"),
])
def test_usage_errors_across_hosts(args, message):
    env = {k: v for k, v in os.environ.items() if k != "FORESTCC_CLUSTER"}
    p = subprocess.run([*LAUNCHER, *args], env=env, capture_output=True, text=True,
                       timeout=JOB_TIMEOUT)
    assert p.returncode != 0 and message in p.stderr, p.stderr


class _EndsBetweenLooks:
    """A rank that is still running at forestcc-run's first look and has exited 2 at every later
    one: it ends between two looks. Its pid names no process (os.killpg finds nothing)."""

    pid = 2 ** 30

    def __init__(self):
        self.looks = 0
        self.returncode = None

    def poll(self):
        self.looks += 1
        if self.looks > 1:
            self.returncode = 2
        return self.returncode

    def wait(self):
        return self.poll()


def test_a_rank_that_fails_between_two_looks_fails_the_job():
    """CI once saw forestcc-run exit 0 after its one rank exited 2: the failure check found the
    rank running, the all-finished check a moment later found it finished. Every decision now
    comes from one look at every rank."""
    import argparse

    from forestcc.launch_hosts import Placement
    from forestcc.launcher import _Job

    job = _Job(argparse.Namespace(grace=0.0), [Placement(0, "", 0, 1)], starter=None)
    job.procs = [_EndsBetweenLooks()]
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert job.supervise() == 2
    finally:
        for s, h in old.items():
            signal.signal(s, h)
