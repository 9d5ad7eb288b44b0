"""Runs last: the suite left no forestcc shared memory and no processes behind. Both checks look
only at this run's namespace (conftest.SHM_PREFIX), so other forestcc jobs on the machine do not
fail them."""
import os

from conftest import SHM_PREFIX, shm_segments, suite_processes


def test_no_leaked_shared_memory():
    mine = f"{SHM_PREFIX}-{os.getpid()}-"   # this process's own may live until it exits
    assert {s for s in shm_segments() if not s.startswith(mine)} == set()


def test_no_leaked_rank_processes():
    leaked = suite_processes()
    assert not leaked, f"processes the suite started still running: {leaked}"
