"""Shared-memory segments never outlive their job: normal exit, fatal signals, SIGKILL (swept by
the next forestcc process and by forestcc-run)."""
import os
import subprocess
import sys

import pytest
from conftest import PROGRAMS, clean_env, run_job, shm_segments


def _segments_of(pid: int) -> set[str]:
    return {n for n in shm_segments() if n.startswith(f"fcc-{pid}-")}


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
