"""Collectives on real processes against numpy references: every collective x dtype x op x
layout, rank counts 1..8, sizes 0 / 1 / uneven / large, async handles, two communicators at
once, and every argument error."""
from __future__ import annotations

import json

import ml_dtypes  # noqa: F401 - the rank programs' bfloat16 and float8 arrays need it
import pytest
from conftest import run_job

from forestcc import _C

# Block element counts: empty, one element, counts that do not divide by any rank count.
SMALL = "0,1,7,1001"
# For the reductions also: more than two of the kernels' 2048-element tiles, and a ragged end.
TILES = "4099"


def _ok(result, n):
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    checked = result.lines("CHECKED")
    assert len(checked) == n, result.stdout[-2000:]
    assert all(int(c.split()[1]) > 0 for c in checked)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_every_collective_dtype_op_and_algorithm(n):
    # every dtype x op through algo="auto"; every built-in algorithm on three of the dtypes
    _ok(run_job(n, "collectives_check.py", "all", SMALL, "--reduction-sizes", TILES,
                "--algo-dtypes", "float32,int64,bfloat16"), n)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fp8_with_every_algorithm(n):
    # float8_e4m3fn and float8_e5m2: every collective x op x built-in algorithm (the test above
    # runs them through "auto" only); results must equal numpy's (ml_dtypes') bit for bit
    _ok(run_job(n, "collectives_check.py", "all", SMALL, "--reduction-sizes", TILES,
                "--dtypes", "float8_e4m3fn,float8_e5m2"), n)


def test_the_check_sees_a_wrong_element_anywhere():
    # the checker itself: one wrong element per result, never the first (a check of element 0
    # alone, or of the first tile, would pass a broken collective), must fail every such result
    result = run_job(2, "collectives_check.py", "auto", "1,7," + TILES, "--corrupt",
                     "--dtypes", "int8,uint64,float16,bfloat16,float64,float8_e5m2")
    assert result.returncode != 0, result.stdout[-2000:]
    for rank in range(2):
        mine = [ln.split()[1:] for ln in result.stdout.splitlines() if ln.startswith(f"[{rank}] ")]
        (checked,) = [w for w in mine if w[0] == "CHECKED"]
        (corrupted,) = [w for w in mine if w[0] == "CORRUPTED"]
        assert int(corrupted[1]) > 0 and checked[3] == corrupted[1], (rank, checked, corrupted)


@pytest.mark.parametrize("n", [2, 3])
def test_forestcc_allocated_memory(n):
    _ok(run_job(n, "collectives_check.py", "auto", "0,5,4099", "--memory", "forestcc"), n)


@pytest.mark.parametrize("memory", ["forestcc", "numpy"])
def test_streaming_copies(memory):
    # FORESTCC_STREAMING_BYTES=1: every copy of 64 KiB or more uses streaming stores, here with
    # odd sizes (unaligned heads and tails); mapped peers (forestcc memory) and local copies
    _ok(run_job(3, "collectives_check.py", "direct,ring", "0,5,100003", "--memory", memory,
                "--dtypes", "float32,int8", env={"FORESTCC_STREAMING_BYTES": "1"}), 3)


def test_released_peer_buffers_are_unmapped():
    # a long sweep over new forestcc.empty buffers used to keep every peer buffer mapped (OOM)
    result = run_job(3, "segment_churn.py")
    assert result.returncode == 0, result.stdout + result.stderr
    counts = [int(line.split()[1]) for line in result.lines("DELETED_MAPPINGS")]
    assert len(counts) == 3 and max(counts) <= 2, result.stdout


@pytest.mark.parametrize("n", [2, 3, 5])
def test_eager_plans(n, tmp_path):
    # a table that names eager for every size: auto uses it only up to what a bank holds
    table = {"version": 1, "source": "test", "rules": [
        {"collective": "all_reduce", "min_ranks": 1, "max_ranks": 64, "min_bytes": 0,
         "max_bytes": None, "algorithm": "eager"}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(n, "eager_check.py", str(tmp_path), env={"FORESTCC_TUNING": str(path)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert len(result.lines("OK")) == n, result.stdout
    limit = (1 << 20) // (n - 1)
    plans = result.lines("PLAN")
    assert len(plans) == 5 * n, result.stdout
    for line in plans:
        _, nbytes, name = line.split()
        assert name.startswith("eager_" if int(nbytes) <= limit else "direct"), line


@pytest.mark.parametrize("n", [2, 3, 5])
def test_eager_plans_with_packets(n):
    # FORESTCC_PACKETS=on: eager calls move their data as packets (flag and data in each 8-byte
    # word, no signal); every collective eager serves, every dtype and op, in place and out of
    # place, sizes whose bytes start and end off 8-byte boundaries, and 0 (one empty packet)
    _ok(run_job(n, "collectives_check.py", "eager", "0,1,3,7,100,1001", "--reduction-sizes", "4099",
                env={"FORESTCC_PACKETS": "on"}), n)


def test_eager_plans_with_packets_over_tcp():
    # through tcp (forced on one node) the peers' banks are not mapped: the calls use signals
    _ok(run_job(3, "collectives_check.py", "eager", "1,100", "--dtypes", "float32,int8",
                env={"FORESTCC_PACKETS": "on", "FORESTCC_TRANSPORT": "tcp"}), 3)


def test_eager_calls_interleaved_with_others_with_packets(tmp_path):
    # eager_check's interleavings with packets: banks alternate across eager plans, sizes past
    # what the packet bank holds run with signals, a call too large for a bank is refused alike
    table = {"version": 1, "source": "test", "rules": [
        {"collective": "all_reduce", "min_ranks": 1, "max_ranks": 64, "min_bytes": 0,
         "max_bytes": None, "algorithm": "eager"}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(3, "eager_check.py", str(tmp_path),
                     env={"FORESTCC_TUNING": str(path), "FORESTCC_PACKETS": "on"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert len(result.lines("OK")) == 3, result.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_that_disagree_on_packets_raise(n):
    # the setting is part of the call stamps: without it the ranks would wait for what the
    # other never sends, until the timeout (which the test sets long, so that is a failure)
    result = run_job(n, "packets_mismatch.py", env={"FORESTCC_TIMEOUT": "300"})
    assert sorted(ln.split()[1] for ln in result.lines("MISMATCH")) == [str(r) for r in range(n)], (
        result.stdout[-3000:] + result.stderr[-3000:])


@pytest.mark.parametrize("case", ["small", "large"])
@pytest.mark.parametrize("n", [2, 3])
def test_ranks_whose_packet_settings_decide_alike_run(n, case):
    # what the stamps compare is whether the call moves its data as packets: "auto" and "off"
    # on host memory, or any settings for a call too large for packets, agree (with the setting
    # in the stamp, this raised a MismatchError)
    result = run_job(n, "packets_agreement.py", case)
    assert sorted(ln.split()[1] for ln in result.lines("OK")) == [str(r) for r in range(n)], (
        result.stdout[-3000:] + result.stderr[-3000:])


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_that_choose_different_algorithms_raise(n, tmp_path):
    rule = {"collective": "all_reduce", "min_ranks": 1, "max_ranks": 64, "min_bytes": 0,
            "max_bytes": None}
    table = {"version": 1, "source": "test", "rules": [
        {**rule, "algorithm": "direct", "memory": "shared"},
        {**rule, "algorithm": "eager", "memory": "private"}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(n, "mixed_memory.py", env={"FORESTCC_TUNING": str(path)})
    assert sorted(result.lines("MISMATCH")) == [f"MISMATCH {r}" for r in range(n)], (
        result.stdout[-3000:] + result.stderr[-3000:])


@pytest.mark.parametrize("algo", ["eager", "direct", "direct_small", "ring"])
def test_count_mismatch_between_ranks_is_an_error(algo):
    result = run_job(3, "count_mismatch.py", algo)
    assert sorted(result.lines("MISMATCH")) == [f"MISMATCH {r}" for r in range(3)], (
        result.stdout[-3000:] + result.stderr[-3000:])


@pytest.mark.parametrize("algo,which,n", [("auto", "peer", 3), ("direct", "peer", 3), ("pairwise", "peer", 3),
                                          ("bruck", "peer", 3), ("direct", "self", 3), ("pairwise", "self", 3),
                                          ("2dh:0,0,1,1", "peer", 4), ("2dh:0,0,1,1", "far", 4),
                                          ("2dh:0,0,0,1,1", "far", 5), ("direct", "far", 4)])
def test_all_to_all_v_splits_mismatch_between_ranks_is_an_error(algo, which, n):
    # "far" with 2DH: rank 1's two disagreements are with ranks of the other node, whose blocks
    # the relay there moves in one span (its total agrees; before, the data landed shifted in
    # rank 1's output, as success); rank 1 must raise, a rank that needs none of it may finish
    result = run_job(n, "splits_mismatch.py", algo, which)
    ended = {line.split()[1]: line.split()[0] for line in result.lines("MISMATCH") + result.lines("OK")}
    want = {str(r) for r in range(n)}
    assert set(ended) == want and ended["1"] == "MISMATCH", result.stdout[-3000:] + result.stderr[-3000:]
    if which == "peer":
        assert set(ended.values()) == {"MISMATCH"}, result.stdout[-3000:]


@pytest.mark.parametrize("n", [3, 5])
def test_all_reduce_results_are_identical_on_every_rank(n):
    result = run_job(n, "identical_results.py")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert result.lines("IDENTICAL"), result.stdout


@pytest.mark.parametrize("n,transport", [(2, "auto"), (2, "cma"), (3, "auto"), (5, "auto")])
def test_tiled_reductions(n, transport):
    # direct's reductions run tile by tile (schedules/README.md, "Tiled reductions"); on 2 ranks
    # also a plan whose put overlaps what its get has yet to read, which must not be tiled
    result = run_job(n, "tiled_reduce_check.py", env={"FORESTCC_TRANSPORT": transport})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert result.lines("TILED OK"), result.stdout


@pytest.mark.parametrize("level", _C.reduce_kernels.supported())
def test_every_cpu_isa_level(level):
    # FORESTCC_CPU_ISA forces the reductions' instruction set (tests/test_reduce_kernels.py holds
    # the kernels to numpy and to each other); here whole collectives run at each level
    _ok(run_job(2, "collectives_check.py", "auto", "1,7," + TILES,
                "--dtypes", "float32,float16,bfloat16,float8_e4m3fn,int8",
                env={"FORESTCC_CPU_ISA": level}), 2)


def test_unknown_cpu_isa_level_fails_at_init():
    result = run_job(2, "collectives_check.py", "auto", "7", env={"FORESTCC_CPU_ISA": "avx1024"})
    assert result.returncode != 0
    assert "FORESTCC_CPU_ISA='avx1024' is not auto, v2, avx2 or avx512" in result.stdout + result.stderr


@pytest.mark.parametrize("n,setting", [(2, "on"), (3, "on"), (2, "off")])
def test_reused_private_buffers_move_to_huge_pages(n, setting):
    # cpp/src/executor/huge_pages.hpp: on a buffer's second use, not its first; never with 0
    env = {"FORESTCC_HUGE_PAGE_BYTES": "0"} if setting == "off" else {}
    result = run_job(n, "huge_pages_check.py", setting, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    if result.lines("UNSUPPORTED"):
        pytest.skip(result.stdout.strip())
    assert result.lines("HUGE PAGES"), result.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_64_mib_messages(n):
    # 16 Mi float32 elements per block = 64 MiB (all_gather/reduce_scatter: per rank block)
    count = str(16 * 1024 * 1024 // n)
    _ok(run_job(n, "collectives_check.py", "auto", count, "--dtypes", "float32",
                "--collectives", "all_reduce,all_gather,reduce_scatter,all_to_all"), n)


def test_errors_are_refused_before_communicating():
    result = run_job(2, "collectives_errors.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.lines("OK")) == 2


@pytest.mark.parametrize("what", ["count", "collective", "root", "dtype"])
def test_debug_cross_check_reports_mismatch(what):
    result = run_job(2, "collectives_debug.py", what, env={"FORESTCC_DEBUG": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.lines("MISMATCH")
    assert len(lines) == 2, result.stdout
    assert all("rank 0" in ln and "rank 1" in ln for ln in lines)
    # The per-rank table, on the rank that found the mismatch and on the one it reached.
    assert all("FORESTCC_DEBUG: collective #1 on each rank" in ln for ln in lines), lines


def test_two_communicators_concurrently():
    # the long timeout makes a split that waits for a refusing rank a failure, not a pass
    result = run_job(4, "collectives_split.py", env={"FORESTCC_TIMEOUT": "300"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.lines("OK")) == 4
