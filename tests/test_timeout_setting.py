"""The timeout given to forestcc.init() is the one every wait of that communicator uses."""
from conftest import run_job


def test_init_timeout_bounds_plan_waits(no_new_shm):
    result = run_job(2, "init_timeout.py", env={"FORESTCC_TIMEOUT": "600"}, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(result.lines("OK")) == ["OK 0 3.0", "OK 1 3.0"], result.stdout
