"""No silent wrong answers: ranks whose calls disagree in collective, root, dtype, op, count,
algorithm or placement each return the right answer for their own call or raise MismatchError
(tests/programs/mismatch_matrix.py); none returns wrong data, writes past its buffers or waits
for the timeout."""
from __future__ import annotations

import json

import pytest

from conftest import run_job

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "gather", "scatter", "barrier"]
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"all_reduce", "reduce_scatter", "reduce"}


def one_change_cases(differing: list[int]) -> list[list]:
    """Every collective against a call that differs from it in exactly one thing."""
    cases = []
    for coll in COLLECTIVES:
        base = {"coll": coll, "count": 64}
        variants = [{**base, "coll": other} for other in COLLECTIVES if other != coll]
        if coll != "barrier":
            variants += [{**base, "count": 65}, {**base, "count": 32, "dtype": "float64"},
                         {**base, "dtype": "int32"}, {**base, "dtype": "bfloat16"}]
        if coll in ROOTED:
            variants.append({**base, "root": 1})
        if coll in REDUCING:
            variants += [{**base, "op": "max"}, {**base, "op": "prod"}]
        cases += [[base, v, differing] for v in variants]
    return cases


# The reports of issue 12, as they were found (sizes and algorithms included).
REPORTED = [
    [{"coll": "all_reduce", "count": 1000}, {"coll": "reduce_scatter", "count": 1000}, [1]],
    [{"coll": "all_gather", "count": 4096}, {"coll": "reduce_scatter", "count": 4096}, [1]],
    [{"coll": "all_gather", "count": 4096, "algo": "direct"},
     {"coll": "all_to_all", "count": 4096, "algo": "direct"}, [1]],
    [{"coll": "all_reduce"}, {"coll": "barrier"}, [1]],
    [{"coll": "gather", "count": 2}, {"coll": "gather", "count": 2, "root": 1}, [1]],
    [{"coll": "scatter", "count": 2}, {"coll": "scatter", "count": 2, "root": 1}, [1]],
    [{"coll": "reduce", "count": 2}, {"coll": "reduce", "count": 2, "root": 1}, [1]],
    [{"coll": "broadcast", "count": 1000}, {"coll": "broadcast", "count": 1000, "root": 1}, [1]],
    [{"count": 1000}, {"count": 500, "dtype": "float64"}, [1]],
    [{"count": 1000}, {"count": 1000, "op": "max"}, [1]],
    [{"algo": "direct"}, {"algo": "ring"}, [1]],
    [{"algo": "direct", "in_place": True}, {"algo": "direct", "in_place": False}, [1]],
    [{"coll": "all_reduce", "count": 1 << 20}, {"coll": "all_reduce", "count": 1 << 20,
                                                 "dtype": "int32"}, [1]],
]
REPORTED_4 = [
    [{"coll": "gather", "count": 1 << 20}, {"coll": "broadcast", "count": 1 << 20}, [3]],
    [{"coll": "all_reduce", "count": 100, "algo": "ring"},
     {"coll": "all_reduce", "count": 101, "algo": "ring"}, [0]],
    [{"coll": "all_reduce", "count": 100, "algo": "direct"},
     {"coll": "all_reduce", "count": 101, "algo": "direct"}, [0]],
]


def check(result, cases):
    lines = result.lines("CASE")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    bad = [ln for ln in lines if ln.split()[2] not in ("OK", "RAISED")]
    assert not bad, "\n".join(bad[:20])
    raised = {int(ln.split()[1]) for ln in lines if ln.split()[2] == "RAISED"}
    # Every case is a real disagreement: some rank must have noticed it.
    assert raised == set(range(len(cases))), sorted(set(range(len(cases))) - raised)


@pytest.mark.parametrize("n,differing", [(2, [1]), (3, [2]), (4, [1, 2])])
def test_no_silent_wrong_answer_matrix(n, differing, no_new_shm):
    cases = one_change_cases(differing)
    result = run_job(n, "mismatch_matrix.py", json.dumps(cases), timeout=600)
    check(result, cases)
    assert len(result.lines("CASE")) == n * len(cases)


def test_reported_mismatches_raise_on_two_ranks(no_new_shm):
    result = run_job(2, "mismatch_matrix.py", json.dumps(REPORTED))
    check(result, REPORTED)


def test_reported_mismatches_raise_on_four_ranks(no_new_shm):
    result = run_job(4, "mismatch_matrix.py", json.dumps(REPORTED_4))
    check(result, REPORTED_4)


def test_bad_arguments_name_the_argument(no_new_shm):
    for n in (1, 3, 4):
        result = run_job(n, "bad_arguments.py")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert len(result.lines("OK")) == n, result.stdout


@pytest.mark.parametrize("case", ["python", "api", "async", "plan", "standin"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_call_one_rank_refused_fails_on_every_rank(n, case, no_new_shm):
    # Rank 1's call is refused (its error raised there) and it goes on to its next call. Without
    # the refusal taking the call's number, that next call met the others' first and both
    # returned (the others' with data of two different calls). The long timeout makes a hang a
    # failure of the test, not a pass.
    result = run_job(n, "refused_call.py", case, env={"FORESTCC_TIMEOUT": "300"})
    out = result.stdout[-4000:] + result.stderr[-3000:]
    first = {int(ln.split()[1]): ln for ln in result.lines("FIRST")}
    second = {int(ln.split()[1]): ln for ln in result.lines("SECOND")}
    assert sorted(first) == sorted(second) == list(range(n)), out
    # its own argument error, or the memory it could not have
    assert first[1].split()[2] in (("ForestccError",) if case == "standin" else ("ValueError", "TypeError")), out
    for r in range(n):
        if case == "standin" and r > 1 and first[r].split()[2] == "returned":
            pass  # the gather's other non-root ranks need nothing from rank 1: their part may end
        elif r != 1:
            assert first[r].split()[2] in ("MismatchError", "AbortedError"), out
            # found here, or as a peer reported it (rank 1 itself, whose next call may find the
            # mismatch first: its report says it refused a call)
            assert "rank 1 refused its part of this call" in first[r] or "rank 1 reported" in first[r] \
                and "this rank refused its part of collective" in first[r], out
        assert second[r].split()[2] in ("MismatchError", "AbortedError"), out


@pytest.mark.parametrize("case", ["send", "recv", "api", "malformed", "batch", "async", "split"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_send_or_recv_one_rank_refused_fails_on_its_peer(n, case, no_new_shm):
    # Rank 1's send/recv is refused (its error raised there) and it goes on. Without the refused
    # messages taking their places, rank 0's match met rank 1's next message (returned as success
    # with the wrong data) and the pair went out of step. The long timeout makes a hang a failure.
    result = run_job(n, "refused_send_recv.py", case, env={"FORESTCC_TIMEOUT": "300"})
    out = result.stdout[-4000:] + result.stderr[-3000:]
    lines = {(ln.split()[0], int(ln.split()[1])): ln.split(" ", 2)[2]
             for key in ("FIRST", "SECOND", "THIRD", "SPLIT", "EARLIER") for ln in result.lines(key)}
    assert lines[("FIRST", 1)].split()[0] in ("ValueError", "TypeError"), out  # its own argument error
    assert lines[("FIRST", 0)].startswith("MismatchError") and "rank 1 refused its" in lines[("FIRST", 0)], out
    for r in range(2, n):
        assert lines[("FIRST", r)] == "ok", out
    for r in range(n):
        assert lines[("SECOND", r)] == "ok" and lines[("THIRD", r)] == "ok", out
    if case == "split":
        assert lines[("SPLIT", 1)] == "ok", out
    if case == "async":
        assert lines[("EARLIER", 0)] == "ok", out
