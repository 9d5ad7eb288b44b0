"""Runs last: the suite left no forestcc shared memory and no rank processes behind."""
import os

from conftest import shm_segments


def test_no_leaked_shared_memory():
    mine = f"fcc-{os.getpid()}-"
    assert {s for s in shm_segments() if not s.startswith(mine)} == set()


def test_no_leaked_rank_processes():
    leaked = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"FORESTCC_JOB_ID=" in env and state not in ("Z", "X"):
            leaked.append(pid)
    assert not leaked, f"rank processes still running: {leaked}"
