"""Shared-memory segments never outlive their job: normal exit, fatal signals, SIGKILL (swept by
the next forestcc process and by forestcc-run). And the suite's own namespace: its leak checks
see only this run's segments and processes, never another forestcc job's on the machine; and
its bound on hypothesis's shrinking."""
import os
import socket
import subprocess
import sys

import pytest
from conftest import (
    PROGRAMS,
    SHM_PREFIX,
    SHRINK_SECONDS,
    assert_no_new_shm,
    clean_env,
    free_port_pair,
    run_job,
    shm_segments,
    suite_processes,
)


def _segments_of(pid: int) -> set[str]:
    return {n for n in shm_segments() if n.startswith(f"{SHM_PREFIX}-{pid}-")}


@pytest.mark.parametrize("how", ["exit", "sigterm", "segv"])
def test_segments_are_unlinked_when_the_process_ends(how):
    p = subprocess.run([sys.executable, str(PROGRAMS / "shm_crash.py"), how], env=clean_env(),
                       capture_output=True, text=True, timeout=120)
    pid = int(p.stdout.split()[1])
    assert not _segments_of(pid)


def test_sigkilled_process_segments_are_swept():
    from forestcc import _C
    p = subprocess.run([sys.executable, str(PROGRAMS / "shm_crash.py"), "sigkill"],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == -9
    pid = int(p.stdout.split()[1])
    assert _segments_of(pid), "SIGKILL leaves the segment until a sweep (nothing can catch it)"
    assert _C.sweep_stale_shared_memory() >= 1
    assert not _segments_of(pid)


def test_forestcc_run_sweeps_after_a_killed_rank(no_new_shm):
    res = run_job(2, "errors_job.py", "peer_dies")
    assert res.returncode != 0  # no_new_shm checks that nothing was left


def test_freed_array_releases_its_segment():
    import gc

    import forestcc
    before = shm_segments()
    a = forestcc.empty((256, 256), "float64")
    assert len(shm_segments() - before) == 1
    del a
    gc.collect()
    assert shm_segments() - before == set()


# -- the suite's own namespace --------------------------------------------------------------------
# Prints the names of the segments this process created, then waits until its stdin closes.
_ALLOCATE_AND_WAIT = ("import os, sys, forestcc; a = forestcc.empty(16, 'float32'); "
                      "print('SEG', *sorted(n for n in os.listdir('/dev/shm') "
                      "if f'-{os.getpid()}-' in n), flush=True); sys.stdin.read()")


def _start_waiting(env: dict) -> tuple[subprocess.Popen, list[str]]:
    p = subprocess.Popen([sys.executable, "-c", _ALLOCATE_AND_WAIT], env=env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = p.stdout.readline().split()
    assert line[:1] == ["SEG"] and line[1:], line
    return p, line[1:]


def _finish(p: subprocess.Popen) -> None:
    p.communicate(timeout=120)
    assert p.returncode == 0


def test_ranks_inherit_the_suites_prefix():
    """Every process the suite starts, ranks under forestcc-run included, names its shared memory
    with this run's prefix (set once in conftest)."""
    assert SHM_PREFIX != "fcc" and os.environ["FORESTCC_SHM_PREFIX"] == SHM_PREFIX
    code = ("import os, forestcc; a = forestcc.empty(16, 'float32'); print('SEG', "
            "os.environ['FORESTCC_SHM_PREFIX'], *sorted(n for n in os.listdir('/dev/shm') "
            "if f'-{os.getpid()}-' in n))")
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "2", "--label", "--",
                        sys.executable, "-c", code], env=clean_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [ln.split()[1:] for ln in p.stdout.splitlines() if " SEG " in ln]
    assert len(lines) == 2, p.stdout
    for _, prefix, *names in lines:
        assert prefix == SHM_PREFIX and names, lines
        assert all(n.startswith(f"{SHM_PREFIX}-") for n in names), lines


def test_leak_checks_ignore_another_jobs_segments_and_processes():
    """A forestcc job beside the suite (default prefix "fcc") holding a segment and a running
    rank is none of the suite's business: neither check reports it."""
    other = None
    try:
        with assert_no_new_shm():   # raises if the other job's segment counted as this run's
            other, names = _start_waiting(clean_env(FORESTCC_SHM_PREFIX="fcc",
                                                    FORESTCC_JOB_ID="another-job"))
        # the check above ran while the other job's segment existed; it still does
        assert all(n.startswith("fcc-") and os.path.exists(f"/dev/shm/{n}") for n in names)
        assert not set(names) & shm_segments()
        assert other.pid not in suite_processes()
    finally:
        if other is not None:
            _finish(other)


def test_leak_checks_see_the_suites_own():
    """The same checks do report this run's: a running child, and the segment a SIGKILLed child
    leaves until the sweep."""
    mine, names = _start_waiting(clean_env())
    try:
        assert set(names) <= shm_segments()
        assert mine.pid in suite_processes()
    finally:
        _finish(mine)
    assert mine.pid not in suite_processes()
    with pytest.raises(AssertionError, match="segments left behind"), assert_no_new_shm():
        subprocess.run([sys.executable, str(PROGRAMS / "shm_crash.py"), "sigkill"],
                       env=clean_env(), capture_output=True, timeout=120)
    from forestcc import _C
    assert _C.sweep_stale_shared_memory() >= 1


def test_port_pair_is_held_until_the_test_ends():
    """free_port_pair()'s ports cannot be taken by another job (a bind without SO_REUSEADDR)
    while the test runs, yet forestcc's rank 0 (which sets SO_REUSEADDR) can listen on p + 1 and
    be connected to."""
    port = free_port_pair()
    for p in (port, port + 1):
        for host in ("", "127.0.0.1"):
            with socket.socket() as other, pytest.raises(OSError):
                other.bind((host, p))
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port + 1))
        listener.listen()
        with socket.create_connection(("127.0.0.1", port + 1), timeout=60):
            listener.accept()[0].close()


def test_hypothesis_shrinking_is_bounded():
    """The tests' own @settings (here one like theirs) inherit the suite's profile: one bug per
    test, no explain phase, and a shrink time cap set for this test (hypothesis's default lets
    every failing test shrink for five minutes)."""
    from hypothesis import Phase, settings
    from hypothesis.internal.conjecture import engine
    theirs = settings(max_examples=40, deadline=None, derandomize=True)
    assert theirs.report_multiple_bugs is False
    assert Phase.shrink in theirs.phases and Phase.explain not in theirs.phases
    assert 0 <= engine.MAX_SHRINKING_SECONDS <= SHRINK_SECONDS < 300


def test_sweep_spares_a_job_whose_prefix_extends_this_one():
    """A dead pid in the place of a pid is not enough: "<prefix>-7-<pid>-..." of a live job with
    prefix "<prefix>-7" must survive this prefix's sweep; a name of forestcc's shape whose owner
    is dead is swept."""
    from forestcc import _C
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    prefix = os.environ["FORESTCC_SHM_PREFIX"]
    live = f"{prefix}-{dead}-{os.getpid()}-0-0000abcd-ctl"   # another job's, by its shape
    stale = f"{prefix}-{dead}-0-0000abcd-ctl"                # this prefix's, owner dead
    for name in (live, stale):
        with open(f"/dev/shm/{name}", "w"):
            pass
    try:
        _C.sweep_stale_shared_memory()
        assert os.path.exists(f"/dev/shm/{live}")
        assert not os.path.exists(f"/dev/shm/{stale}")
    finally:
        for name in (live, stale):
            if os.path.exists(f"/dev/shm/{name}"):
                os.unlink(f"/dev/shm/{name}")


@pytest.mark.parametrize("mode", ["exit", "sigterm"])
def test_a_forked_child_leaves_its_parents_segments(mode, no_new_shm):
    # before, the child's inherited exit and SIGTERM handlers unlinked the parent's segments
    result = run_job(2, "forked_child.py", mode, env={"FORESTCC_TIMEOUT": "300"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert sorted(result.lines("SEGMENTS")) == ["SEGMENTS 0 kept", "SEGMENTS 1 kept"], out
    assert sorted(result.lines("OK")) == ["OK 0", "OK 1"], out


@pytest.mark.parametrize("prefix", ["", "x" * 41, "job-7", "a/b"])
def test_a_shared_memory_prefix_that_cannot_name_segments_is_refused(prefix):
    # before, a long prefix cut the pid off the names (two ranks' collided, or a killed rank's
    # were never swept), and "-" made one job's names look like another's
    code = "import numpy, forestcc; forestcc.zeros(4, numpy.float32)"
    p = subprocess.run([sys.executable, "-c", code], env=clean_env(FORESTCC_SHM_PREFIX=prefix),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert f"FORESTCC_SHM_PREFIX='{prefix}' must be 1 to 40 letters, digits, '_' or '.'" in p.stderr, p.stderr


def test_a_full_dev_shm_is_an_error_not_a_sigbus():
    # a 4 MiB /dev/shm in a mount namespace of the test's own (root only); before, tmpfs
    # reserved nothing for the segment's size, and the first store past the space was a SIGBUS
    code = ("import numpy, forestcc\n"
            "try:\n"
            "    forestcc.zeros(16 << 20, numpy.uint8)\n"
            "    print('MADE', flush=True)\n"
            "except forestcc.ForestccError as e:\n"
            "    print('REFUSED', e, flush=True)\n")
    script = 'mount -t tmpfs -o size=4m tmpfs /dev/shm || exit 99; exec "$1" -c "$2"'
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", sys.executable, code], env=clean_env(),
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 99 or (p.returncode != 0 and "unshare:" in p.stderr):
        pytest.skip(f"no private /dev/shm here (needs root): {p.stderr.strip()}")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.startswith("REFUSED") and "is /dev/shm large enough?" in p.stdout, p.stdout
