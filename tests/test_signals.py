"""Signals meet forestcc the way a program expects: a SIGTERM handler installed before
forestcc.init() keeps the process and its communicator working (issue 12 item 6); Ctrl-C
interrupts a collective blocked in a native wait, also outside forestcc-run (item 8)."""
from __future__ import annotations

import signal
import time

import pytest
from conftest import PROGRAMS, collect, run_job, spawn_ranks


def test_sigterm_handler_installed_before_init_keeps_the_communicator(no_new_shm):
    result = run_job(2, "sigterm_handler.py")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(result.lines("OK")) == ["OK 0", "OK 1"], result.stdout


def test_sigterm_without_a_handler_still_ends_the_rank_and_cleans_up(no_new_shm):
    result = run_job(2, "sigterm_handler.py", "default")
    assert result.returncode == 128 + signal.SIGTERM, result.stdout + result.stderr
    assert "rank 0" in result.stderr and "SIGTERM" in result.stderr, result.stderr


@pytest.mark.parametrize("plan", [None, "split_worker_all_gather_2.json", "async", "recv", "split"])
def test_ctrl_c_interrupts_a_blocked_collective(plan, no_new_shm):
    # Outside forestcc-run (torchrun's environment): nobody else stops the rank, and the
    # timeout is far longer than the test waits. With the plan, the blocked wait is on a pool
    # worker while the main thread waits for it: that wait must run the signal handlers too. So
    # must an async handle's wait() (on the engine's queue) and split's bootstrap exchange.
    args = [str(PROGRAMS / plan) if plan.endswith(".json") else plan] if plan else []
    procs = spawn_ranks("torchrun", 2, "blocked_collective.py", *args,
                        extra_env={"FORESTCC_TIMEOUT": "3000"})
    waiter, sleeper = procs
    try:
        line = waiter.stdout.readline()
        assert line.strip() == "WAITING", line + waiter.stderr.read()
        time.sleep(2)  # into the native wait (were it earlier, Python would raise it anyway)
        waiter.send_signal(signal.SIGINT)
        [result] = collect([waiter], timeout=120)
    finally:
        sleeper.terminate()  # SIGTERM: it unlinks its segments (SIGKILL would leave them)
        collect([sleeper])
    assert "INTERRUPTED" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("inside", ["collective", "bootstrap"])
def test_a_signal_handler_may_not_call_a_collective_inside_one(inside, no_new_shm):
    # bootstrap: the handler's send_bytes would take the bootstrap the interrupted recv_bytes holds
    result = run_job(2, "handler_reentry.py", *(["bootstrap"] if inside == "bootstrap" else []),
                     env={"FORESTCC_TIMEOUT": "600"})
    assert "REFUSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK 1" in result.stdout, result.stdout + result.stderr


def test_ctrl_c_during_an_nccl_shim_call_belongs_to_the_python_program(tmp_path, no_new_shm):
    # before, the shim's wait ran the Python program's handlers itself (the forestcc module,
    # imported too, had set its interrupt check): ncclAllReduce failed and the
    # KeyboardInterrupt was lost
    result = run_job(2, "shim_ctrl_c.py", str(tmp_path), env={"FORESTCC_TIMEOUT": "600"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert result.lines("KEYBOARDINTERRUPT") == ["KEYBOARDINTERRUPT sum=ok async=0"], out
    assert result.lines("RESULT") == ["RESULT 0 sum=ok"], out


@pytest.mark.parametrize("mode", ["star", "p2p"])
def test_a_peer_learns_at_once_that_an_interrupted_bootstrap_is_broken(mode, tmp_path, no_new_shm):
    # p2p: before, rank 1 waited out FORESTCC_TIMEOUT on rank 0, whose bootstrap exchanges
    # nothing more after the interrupt (now it closes its connections); star: rank 0 tells the
    # ranks of its star exchange (abortAll). The timeout is long, so the message tells which.
    n = 3 if mode == "star" else 2
    result = run_job(n, "bootstrap_interrupted.py", str(tmp_path), mode, env={"FORESTCC_TIMEOUT": "240"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.lines("INTERRUPTED") == ["INTERRUPTED 0"], out
    [raised] = result.lines("RAISED") or [out]
    told = "aborted the job: forestcc: interrupted" if mode == "star" else "connection to rank 0 closed"
    assert "RemoteError" in raised and told in raised and "timed out" not in raised, raised
    assert result.returncode == 0, out
