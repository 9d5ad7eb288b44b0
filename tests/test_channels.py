"""Channels between real processes: sizes 0 B to 64 MiB, rounds, several channels, get, and the
guarantee that a wait returns only after the matching signal."""
import pytest
from conftest import run_job


@pytest.mark.parametrize("mode", ["shm", "plain"])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_channel_correctness(mode, size, no_new_shm):
    res = run_job(size, "channel_check.py", mode)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(res.lines("OK")) == [f"OK rank={r}" for r in range(size)]


@pytest.mark.parametrize("size", [2, 5])
def test_several_channels_at_once(size, no_new_shm):
    res = run_job(size, "channel_streams.py")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(res.lines("OK")) == size


def test_channel_arguments_and_waits_with_a_timeout_of_the_callers(no_new_shm):
    res = run_job(2, "channel_arguments.py", env={"FORESTCC_TIMEOUT": "300"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(res.lines("OK")) == ["OK 0", "OK 1"], res.stdout
