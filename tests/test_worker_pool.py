"""The executor's pool of worker threads across plans with different worker counts."""
from conftest import run_job


def test_calls_of_fewer_workers_after_one_of_many(tmp_path, no_new_shm):
    # before, a pool thread the call did not use could wake after the call ended and read it as
    # gone (SIGSEGV, in 5 of 5 runs of 20,000 calls, within 0.4 s)
    result = run_job(2, "worker_pool_shrinks.py", str(tmp_path), "5000", env={"FORESTCC_TIMEOUT": "300"})
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert sorted(result.lines("OK")) == ["OK 0 5000", "OK 1 5000"], out
