"""One conformance body for every transport: put/get at offsets and sizes, signal/wait ordering,
many signals, flush, range errors, wait timeouts and a dead peer, each run over the transport
named (tests/programs/transport_conformance.py). A new transport joins by adding its name here and
its memory to the program's ALLOCATE table."""
import pytest
from conftest import collect, run_job, spawn_ranks

TRANSPORTS = ["shm", "cma", "tcp"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", [2, 3])
def test_data_and_signals(transport, size, no_new_shm):
    res = run_job(size, "transport_conformance.py", transport, "data")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(res.lines("OK")) == [f"OK rank={r}" for r in range(size)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_range_errors_and_timeouts_name_rank_and_peer(transport, no_new_shm):
    res = run_job(2, "transport_conformance.py", transport, "errors")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not res.lines("NO ERROR"), res.stdout
    ranges = res.lines("RANGE")
    assert len(ranges) == 2, res.stdout
    assert all("forestcc rank 0:" in e and "rank 0 -> rank 1" in e for e in ranges)
    assert "destination range [1020, 1020+8)" in ranges[0] and "source range [1020, 1020+8)" in ranges[1]
    (timeout,) = res.lines("TIMEOUT")
    assert "forestcc rank 0:" in timeout and "no signal from rank 1 within the 1 s given to wait()" in timeout


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_dead_peer_is_detected(transport):
    # Without forestcc-run (which would stop rank 0 at once), rank 0 must notice by itself.
    r0, r1 = collect(spawn_ranks("torchrun", 2, "transport_conformance.py", transport, "dead",
                                 extra_env={"FORESTCC_TIMEOUT": "120"}))
    assert r1.returncode == -9
    assert r0.returncode == 0, r0.stderr
    assert "DEAD" in r0.stdout and "rank 1 (pid" in r0.stdout and "died" in r0.stdout
