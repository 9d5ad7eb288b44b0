"""Plan waits keep FORESTCC_TIMEOUT: a rank that skips a collective costs the others one timeout
and a clear error, never a hang."""
from __future__ import annotations

import re

import pytest
from conftest import run_job

# (collective, algorithm, waiter, skipper): the waiter's plan waits for the skipper directly, so
# its error must name the skipper.
CASES = [
    ("all_reduce", "direct", 0, 2),
    ("all_reduce", "ring", 1, 2),
    ("all_reduce", "eager", 0, 2),
    ("broadcast", "tree", 2, 0),
    ("barrier", "halving_doubling", 0, 1),
]


@pytest.mark.parametrize("collective,algo,waiter,skipper", CASES,
                         ids=[f"{c}-{a}" for c, a, _, _ in CASES])
def test_rank_skipping_a_collective(collective, algo, waiter, skipper):
    """The waiter (FORESTCC_TIMEOUT=5) gets TimeoutError naming the plan step and the skipper;
    the third rank, in the same call with a timeout it never reaches, and the skipper, in no call,
    get AbortedError; so does every rank's next call."""
    res = run_job(3, "skip_collective.py", collective, algo, str(waiter), str(skipper))
    out = res.stdout[-6000:] + res.stderr[-3000:]
    assert res.returncode == 0, out
    for what in ("RESULT", "NEXT"):
        lines = {int(ln.split()[1]): ln for ln in res.lines(what)}
        assert sorted(lines) == [0, 1, 2], out
        for rank, line in lines.items():
            error = line.split()[2]
            if what == "RESULT" and rank == waiter:
                assert error == "TimeoutError" and f"peer={skipper}" in line, out
                message = line.split(maxsplit=4)[4]
                assert re.search(r"\bstep \d+", message), out
                assert re.search(rf"\brank {skipper}\b", message), out
            else:
                assert error == "AbortedError", out
