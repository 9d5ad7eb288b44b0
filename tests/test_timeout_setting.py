"""Wait settings reach the waits: the timeout given to forestcc.init(), and the auto spin time
by the CPUs the ranks may run on."""
import os
import subprocess
import sys

import pytest
from conftest import PROGRAMS, clean_env, run_job


def test_init_timeout_bounds_plan_waits(no_new_shm):
    result = run_job(2, "init_timeout.py", env={"FORESTCC_TIMEOUT": "600"}, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(result.lines("OK")) == ["OK 0 3.0", "OK 1 3.0"], result.stdout


def test_auto_spin_follows_the_cpus_ranks_may_run_on(no_new_shm):
    """Two ranks pinned to one CPU (taskset) must not spin 50 us each wait, whatever the
    machine's CPU count: they would take turns holding the CPU the other needs. The yield time
    is FORESTCC_YIELD_US's, whatever the CPUs."""
    cpu = min(os.sched_getaffinity(0))
    p = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-m", "forestcc.launcher",
                        "-n", "2", sys.executable, str(PROGRAMS / "spin_policy.py")],
                       env=clean_env(FORESTCC_SPIN_US="auto", FORESTCC_YIELD_US="35"), capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    spins = {tuple(map(float, ln.split()[2:])) for ln in p.stdout.splitlines()
             if ln.startswith("SPIN")}
    assert spins == {(1.0, 35.0)}, p.stdout
    if len(os.sched_getaffinity(0)) >= 2:  # spread over two CPUs: each rank has its own
        both = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:2])
        p = subprocess.run(["taskset", "-c", both, sys.executable, "-m", "forestcc.launcher", "-n",
                            "2", sys.executable, str(PROGRAMS / "spin_policy.py")],
                           env=clean_env(FORESTCC_SPIN_US="auto", FORESTCC_YIELD_US="35"), capture_output=True,
                           text=True, timeout=240)
        spins = {tuple(map(float, ln.split()[2:])) for ln in p.stdout.splitlines()
                 if ln.startswith("SPIN")}
        assert spins == {(50.0, 35.0)}, p.stdout + p.stderr


@pytest.mark.parametrize("how", ["env", "init"])
def test_an_infinite_timeout_is_the_longest_not_an_expired_one(how, no_new_shm):
    # before, inf overflowed the deadline: every wait expired at once ("timed out after inf s")
    result = run_job(2, "timeout_inf.py", how, env={"FORESTCC_TIMEOUT": "inf" if how == "env" else "300"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert sorted(result.lines("OK")) == ["OK 0 1000000000.0", "OK 1 1000000000.0"], out

