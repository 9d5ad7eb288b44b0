"""Failures in the middle of a random stream of calls (tests/programs/random_calls.py: every kind
of collective, size, algorithm and memory, send/recv and async calls, the same seeded stream on
every rank): a rank killed, a rank frozen, a rank that passes another size. Every other rank must
raise an error of forestcc's naming a rank; none may return as if the call worked, none may hang.

The ranks run under the torchrun convention, not forestcc-run, which would stop the job itself
when a rank dies: here each survivor has to find out on its own. Where the stream is when the
failure comes is left to chance; what is asserted holds wherever it is."""
from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import JOB_TIMEOUT, collect, spawn_ranks

ERRORS = ("RemoteError", "AbortedError", "TimeoutError", "MismatchError")


def _wait_until_ready(folder, procs, n: int) -> None:
    """Until every rank made READY_AFTER calls (or one ended: the assertions say why)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline:
        if all(os.path.exists(folder / f"ready.{r}") for r in range(n)):
            return
        if any(p.poll() is not None for p in procs):
            return
        time.sleep(0.05)
    raise AssertionError("the ranks did not get under way")


def _failed(res) -> str:
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("FAILED")] or [""]
    return line


def _run_and_break(tmp_path, n: int, seed: int, how: str, victim: int, transport: str = "auto"):
    env = {"FORESTCC_TRANSPORT": transport, "FORESTCC_TIMEOUT": "30"}
    procs = spawn_ranks("torchrun", n, "random_calls.py", str(seed), str(tmp_path), extra_env=env)
    try:
        _wait_until_ready(tmp_path, procs, n)
        procs[victim].send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        survivors = collect([p for r, p in enumerate(procs) if r != victim])
    finally:
        procs[victim].kill()
        procs[victim].wait()
    # What the killed rank made stays until a sweep (forestcc-run or the next forestcc process
    # sweeps; here the ranks are the test's children).
    from forestcc import _C
    _C.sweep_stale_shared_memory()
    return survivors


@pytest.mark.parametrize("n,seed,transport", [(3, 11, "auto"), (5, 12, "auto"), (4, 13, "tcp")])
def test_a_rank_killed_mid_stream_fails_every_other_rank(tmp_path, n, seed, transport, no_new_shm):
    victim = seed % n
    for res in _run_and_break(tmp_path, n, seed, "kill", victim, transport):
        line = _failed(res)
        assert res.returncode == 3 and line, res.stdout[-2000:] + res.stderr[-2000:]
        assert any(f"FAILED {e} " in line for e in ERRORS), line
        assert "rank" in line, line


def test_a_frozen_rank_times_out_every_other_rank(tmp_path, no_new_shm):
    # SIGSTOP: the peer lives but never moves; each other rank gives up at FORESTCC_TIMEOUT
    for res in _run_and_break(tmp_path, 3, 21, "stop", 1):
        line = _failed(res)
        assert res.returncode == 3 and line, res.stdout[-2000:] + res.stderr[-2000:]
        assert "FAILED TimeoutError " in line or "FAILED AbortedError " in line, line
        assert "rank 1" in line, line


@pytest.mark.parametrize("n,seed,at", [(2, 31, 300), (3, 32, 517), (5, 33, 250)])
def test_a_rank_passing_another_size_mid_stream_fails_every_rank(tmp_path, n, seed, at, no_new_shm):
    diverging = seed % n
    procs = spawn_ranks("torchrun", n, "random_calls.py", str(seed), str(tmp_path), str(at), str(diverging),
                        extra_env={"FORESTCC_TIMEOUT": "60"})
    for r, res in enumerate(collect(procs)):
        line = _failed(res)
        assert res.returncode == 3 and line, (r, res.stdout[-2000:] + res.stderr[-2000:])
        assert "FAILED MismatchError " in line or ("FAILED AbortedError " in line and "called" in line), line
        # the error tells the two calls apart: the diverging rank's count and the others'
        assert "count=" in line, line
