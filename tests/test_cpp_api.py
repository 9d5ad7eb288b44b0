"""The C++ collective API (forestcc/collective_api.hpp) from a C++ program that uses only the
public headers and libforestcc.so: examples/cpp/all_reduce.cpp, run under forestcc-run on 1, 3
and 4 ranks, and a bad argument refused with an error that names it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import JOB_TIMEOUT, clean_env

from forestcc import _C

EXAMPLE = Path(_C.__file__).resolve().parent / "bin" / "forestcc-example-all-reduce"


def run_example(n: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label", str(EXAMPLE), *args]
    return subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)


def test_the_example_is_installed():
    assert EXAMPLE.is_file(), f"{EXAMPLE} is missing: CMake builds and installs it with the package"


@pytest.mark.parametrize("n", [1, 3, 4])
def test_example_checks_its_results(n, no_new_shm):
    p = run_example(n)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ok = sorted(line.split("] ", 1)[1] for line in p.stdout.splitlines() if "] OK " in line)
    assert ok == sorted(f"OK {r}" for r in range(n)), p.stdout[-3000:]


def test_bad_root_is_refused_naming_the_argument(no_new_shm):
    p = run_example(3, "--bad-root")
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert "invalid usage" in p.stderr
    assert "root: 3 is out of range: must be a rank in [0, 3)" in p.stderr, p.stderr[-3000:]


def test_the_tuning_table_is_loaded_in_cpp(tmp_path, no_new_shm):
    # no Python in the process: FORESTCC_TUNING is read by libforestcc, errors name the file
    missing = tmp_path / "no-such-tuning.json"
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", "2", "--label", str(EXAMPLE)]
    p = subprocess.run(cmd, env=clean_env(FORESTCC_TUNING=str(missing)), capture_output=True,
                       text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"{missing}: cannot read the tuning table" in p.stderr, p.stderr[-3000:]


def test_a_plan_file_runs_from_cpp(tmp_path, no_new_shm):
    # a plan file path given to the C++ API is loaded by libforestcc's plan loader and runs
    path = tmp_path / "ring_all_reduce_3.json"
    path.write_text(_C.plan.to_json(_C.plan.generate("ring", "all_reduce", 3, in_place=True)))
    p = run_example(3, "--algo", str(path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert len([line for line in p.stdout.splitlines() if "] OK " in line]) == 3, p.stdout
    # one for other rank counts is refused naming the file
    wrong = tmp_path / "ring_all_reduce_2.json"
    wrong.write_text(_C.plan.to_json(_C.plan.generate("ring", "all_reduce", 2, in_place=True)))
    p = run_example(3, "--algo", str(wrong))
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert str(wrong) in p.stderr or "ring_all_reduce_2" in p.stderr, p.stderr[-3000:]


@pytest.mark.parametrize("flag, message", [
    ("--bad-op", "op: 42 is not a forestcc::ReduceOp"),
    ("--bad-dtype", "x: dtype 99 is not a forestcc::DataType"),
    ("--null-x", "x: is NULL with 4 elements"),
])
def test_values_outside_the_enums_and_null_buffers_are_refused(flag, message, no_new_shm):
    # before, op 42 returned with the output untouched or half reduced (a silent wrong answer),
    # dtype 99 and a NULL x crashed the rank in memcpy
    p = run_example(2, flag)
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert message in p.stderr, p.stderr[-3000:]


def test_count_whose_bytes_wrap_is_refused(no_new_shm):
    # 2**62 + 1 floats are 4 bytes modulo 2**64: without the check the call moved 4 bytes and
    # returned, the example's "not refused" line and exit 1
    p = run_example(2, "--huge-count")
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert "x: 4611686018427387905 elements of float32 is more memory than a process can address" in p.stderr, (
        p.stderr[-3000:])

