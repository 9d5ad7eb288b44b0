"""Every error path of the core: silent peer, dead peer, out-of-range access, abort, bad
arguments, failing ranks under forestcc-run."""
import os

import pytest
from conftest import collect, run_job, spawn_ranks


def test_silent_peer_times_out_naming_it():
    res = run_job(2, "errors_job.py", "silent_peer", env={"FORESTCC_TIMEOUT": "2"})
    assert res.returncode == 0, res.stderr
    (err,) = res.lines("ERROR")
    assert "forestcc rank 0:" in err and "rank 1 to signal" in err
    assert "channel rank 0 -> rank 1, tag 0" in err and "timed out after 2 s" in err
    (poisoned,) = res.lines("POISONED")
    assert "rank 0 reported" in poisoned and "timed out" in poisoned


def test_dead_peer_becomes_an_error_not_a_hang():
    # Without forestcc-run (which would stop rank 0 at once), rank 0 must notice by itself.
    r0, r1 = collect(spawn_ranks("torchrun", 2, "errors_job.py", "peer_dies",
                                 extra_env={"FORESTCC_TIMEOUT": "120"}))
    assert r1.returncode == -9
    assert r0.returncode == 0, r0.stderr
    assert "rank 1 (pid" in r0.stdout and "died" in r0.stdout


def test_killed_rank_stops_the_job():
    res = run_job(2, "errors_job.py", "peer_dies")
    assert res.returncode != 0
    assert "forestcc-run: rank 1" in res.stderr and "killed by signal 9 (SIGKILL)" in res.stderr


def test_out_of_range_put_and_get_write_nothing():
    res = run_job(2, "errors_job.py", "out_of_range")
    assert res.returncode == 0, res.stderr
    errors = res.lines("ERROR")
    assert len(errors) == 5 and not res.lines("NO ERROR")
    assert "destination range [1020, 1020+8) is outside the peer's registered memory of 1024" in errors[0]
    assert "source range [0, 0+1025)" in errors[3]
    assert "get on channel" in errors[4]
    assert res.lines("UNTOUCHED")


def test_abort_wakes_waiting_peers():
    res = run_job(2, "errors_job.py", "abort")
    assert res.returncode == 0, res.stderr
    (err,) = res.lines("ERROR")
    assert "rank 0 reported" in err and "giving up on purpose" in err


def test_bad_arguments_are_refused_before_anything_is_sent():
    res = run_job(2, "errors_job.py", "bad_arguments")
    assert res.returncode == 0, res.stderr
    errors = res.lines("ERROR")
    assert not res.lines("NO ERROR") and len(errors) == 6, res.stdout
    assert "peer: must be a rank in [0, 2), got 5" in errors[0]
    assert "must be C-contiguous" in errors[1] and "must be C-contiguous" in errors[2]
    assert "read-only" in errors[3]
    assert errors[4].startswith("ERROR TypeError") and "str" in errors[4]
    assert "tag" in errors[5]


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_timeout_value(bad):
    import forestcc
    with pytest.raises(ValueError, match="timeout"):
        forestcc.init(unique_id=bytes(forestcc.unique_id()), rank=0, size=1, timeout=bad)


def test_bad_timeout_environment():
    import subprocess
    import sys
    from conftest import clean_env
    p = subprocess.run([sys.executable, "-c", "import forestcc; forestcc.init()"],
                       env=clean_env(FORESTCC_TIMEOUT="soon"), capture_output=True, text=True)
    assert p.returncode != 0 and "FORESTCC_TIMEOUT='soon' is not a positive number" in p.stderr


def test_error_in_a_plan_step_carries_its_context_as_data():
    # Rank 1 leaves without calling: rank 0's all_reduce fails at the wait for it, and the error
    # says which collective, plan, worker and step as attributes, not only in its message.
    r0, r1 = collect(spawn_ranks("torchrun", 2, "error_context.py", extra_env={"FORESTCC_TIMEOUT": "120"}))
    assert r1.returncode == 0, r1.stderr
    assert r0.returncode == 0, r0.stderr
    (line,) = [ln for ln in r0.stdout.splitlines() if ln.startswith("CONTEXT")]
    _, collective, plan, worker, step = line.split()
    assert collective == "all_reduce" and "ring" in plan
    assert int(worker) >= 0 and int(step) >= 0


def test_a_communicator_dropped_with_a_queued_call_finishes_it_first(no_new_shm):
    # before, the engine ran the queued call after the arrays it used were freed: the peer got
    # other numbers as success, or the dropping rank's heap was corrupted
    result = run_job(2, "dropped_communicator.py", env={"FORESTCC_TIMEOUT": "300"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert result.lines("RESULT") == ["RESULT ok"], out
    assert sorted(result.lines("DONE")) == ["DONE 0", "DONE 1"], out


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("mode", ["after", "waiting", "recv"])
def test_a_same_node_peer_that_dropped_its_communicator_has_left(n, mode, no_new_shm):
    # before, its waiting peers found out only at FORESTCC_TIMEOUT ("timed out ... waiting for
    # rank 0"); the timeout here is long, so the message tells which it was, not the time taken
    result = run_job(n, "peer_left.py", mode, env={"FORESTCC_TIMEOUT": "240"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    raised = result.lines("RAISED")
    assert len(raised) == n - 1, out
    for line in raised:
        assert "RemoteError" in line or "AbortedError" in line, line
        assert "rank 0 (pid" in line and "left the job" in line, line
        assert "timed out" not in line, line
    assert sorted(result.lines("DONE")) == [f"DONE {r}" for r in range(n)], out
