"""Built-in plan generators (C++, forestcc._C.plan): every algorithm x collective verifies for
1..16 ranks in and out of place; bad requests are refused clearly; the CLI dumps, verifies and
lists them; planted bugs in generated plans are caught."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from forestcc.plan import builtin, load, ops, verify
from forestcc.plan import format as plan_format
from forestcc.plan.cli import plan_main
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_mutations import (check_added_conflicting_put, check_dropped_signal,
                            check_dropped_wait, check_wrong_chunk_index)

SCHEMA = pathlib.Path(__file__).resolve().parents[1] / "schedules" / "plan.schema.json"

ALL = set(ops.COLLECTIVES)
EXPECTED_ALGORITHMS = {
    "ring": {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv",
             "barrier"},
    "direct": ALL,
    "direct_small": {"all_reduce", "reduce", "reduce_scatter", "all_gather", "all_to_all"},
    "halving_doubling": {"all_reduce", "reduce_scatter", "all_gather", "barrier"},
    "bruck": {"all_gather", "all_to_all", "barrier"},
    "pairwise": {"all_to_all", "sendrecv"},
    "tree": {"broadcast", "reduce", "gather", "scatter"},
    "eager": {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"},
    # on one node here; node layouts: tests/test_hierarchical.py
    "hierarchical": {"all_reduce", "all_gather", "reduce_scatter"},
    "2dh": {"all_to_all"},
}
PAIRS = [(algo, c) for algo, collectives in EXPECTED_ALGORITHMS.items() for c in sorted(collectives)]


def _roots(collective, nranks):
    if collective not in ops.ROOTED_COLLECTIVES:
        return [None]
    return sorted({0, nranks // 2, nranks - 1})


def _is_power_of_two(n):
    return n & (n - 1) == 0


def _scratch_within_input(algo, collective, nranks, in_place):
    """Where the docs promise that the scratch a rank touches is no larger than its input
    (schedules/README.md, Built-in generators)."""
    if algo in ("ring", "direct", "pairwise"):
        return True
    if algo == "halving_doubling":
        return _is_power_of_two(nranks) or collective == "all_gather" or (
            collective == "all_reduce" and not in_place)
    if algo == "tree":
        return collective != "reduce"
    return False


def _scratch_touched(plan):
    """The most scratch chunks any rank's memory has accessed (the plan's scratch size counts
    address space, which can be sparse)."""
    touched = [set() for _ in plan["ranks"]]
    for r, entry in enumerate(plan["ranks"]):
        peers = [c["peer"] for c in entry["channels"]]
        for worker in entry["workers"]:
            for op in worker["ops"]:
                n = op.get("n", 1)
                remote = ops.REMOTE_REF_FIELDS.get(op["op"], frozenset())
                refs = [(f, op[f]) for f in ops.REF_FIELDS if f in op]
                refs += [("srcs", ref) for ref in op.get("srcs", [])]
                for field, (buffer, index) in refs:
                    if buffer == ops.SCRATCH:
                        owner = peers[op["ch"]] if field in remote else r
                        touched[owner].update(range(index, index + n))
    return max(map(len, touched))


def _misaligned_ops(plan):
    """Ops whose refs are at different places of a block. Chunk i is part i mod k of its block
    and parts differ in size when k does not divide the count, so every ref of an op must be
    the same part (the executor refuses a size mismatch at run time; the verifier, being
    symbolic, does not see it)."""
    k = plan["chunks_per_block"]
    bad = []
    for r, entry in enumerate(plan["ranks"]):
        for w, worker in enumerate(entry["workers"]):
            for s, op in enumerate(worker["ops"]):
                refs = [op[f] for f in ops.REF_FIELDS if f in op] + op.get("srcs", [])
                if len({index % k for _, index in refs}) > 1:
                    bad.append((r, w, s, op))
    return bad


# ----------------------------------------------------------------------------- correct plans

def test_algorithm_table():
    table = builtin.algorithms()
    assert {name: set(cs) for name, cs in table.items()} == EXPECTED_ALGORITHMS
    assert list(table)[:2] == ["ring", "direct"]
    assert all(builtin.summary(name) for name in table)
    assert builtin.summary("nope") == ""


@pytest.mark.parametrize("algo,collective", PAIRS, ids=[f"{a}-{c}" for a, c in PAIRS])
def test_builtin_plans_verify_for_1_to_16_ranks(algo, collective):
    for nranks in range(1, 17):
        for in_place in (False, True):
            for root in _roots(collective, nranks):
                plan = builtin.generate(algo, collective, nranks, root=root, in_place=in_place)
                result = verify(plan)
                assert result.ok, str(result)
                assert plan["provenance"]["generator"] == f"forestcc.builtin.{algo}"
                assert plan["collective"] == collective and plan["in_place"] == in_place
                assert plan.get("root") == root
                # one worker per rank: the CPU executor runs a thread per worker
                assert all(len(entry["workers"]) == 1 for entry in plan["ranks"])
                assert not _misaligned_ops(plan), _misaligned_ops(plan)[:3]
                if _scratch_within_input(algo, collective, nranks, in_place):
                    assert _scratch_touched(plan) <= plan["buffers"]["input"], plan["name"]


@pytest.mark.parametrize("algo", sorted(EXPECTED_ALGORITHMS))
def test_generated_plans_round_trip_through_json(algo):
    """What generate() returns is exactly what forestcc.plan.loads makes of its JSON."""
    for collective in EXPECTED_ALGORITHMS[algo]:
        for nranks in (1, 3, 8):
            plan = builtin.generate(algo, collective, nranks)
            assert plan_format.loads(plan_format.dumps(plan), "<dump>") == plan


@pytest.mark.parametrize("collective", sorted(EXPECTED_ALGORITHMS["eager"]))
def test_eager_plans_run_with_packets(collective):
    """The built-in eager plans qualify for packets (schedules/README.md, "Packets"), in place or
    not; plans without scratch banks never do."""
    from forestcc import _C
    for n in (2, 3, 5, 8):
        for in_place in (False, True):
            assert _C.plan.runs_with_packets(builtin.generate("eager", collective, n, in_place=in_place))
    for algo in ("direct", "direct_small"):
        assert not _C.plan.runs_with_packets(builtin.generate(algo, collective, 3))


def _eager_all_reduce(n=3):
    import copy
    return copy.deepcopy(builtin.generate("eager", "all_reduce", n))


def _ops(plan, rank):
    return plan["ranks"][rank]["workers"][0]["ops"]


def test_plans_that_packets_would_change_do_not_run_with_packets():
    """Each case is a plan whose results with signals are well defined but with packets would
    not be: packets arrive at their own wait only, and one put's packets per chunk."""
    from forestcc import _C
    assert _C.plan.runs_with_packets(_eager_all_reduce())
    # a scratch chunk read before the wait for the put that fills it (rank 0 reduces, then waits)
    plan = _eager_all_reduce()
    ops0 = _ops(plan, 0)
    reduce = ops0.pop()
    ops0.insert(len(ops0) - 1, reduce)   # between the two waits: slot of rank 2 read before its wait
    assert not _C.plan.runs_with_packets(plan)
    # two puts fill one chunk of rank 1 (rank 0 puts twice, rank 1 waits twice)
    plan = _eager_all_reduce()
    ops0, ops1 = _ops(plan, 0), _ops(plan, 1)
    ops0.insert(1, dict(ops0[0]))
    ops1.insert(ops1.index(next(o for o in ops1 if o["op"] == "wait")), {"op": "wait", "ch": 0})
    assert not _C.plan.runs_with_packets(plan)
    # a plain signal on a channel that also carries packets
    plan = _eager_all_reduce()
    _ops(plan, 0).insert(0, {"op": "signal", "ch": 0})
    _ops(plan, 1).insert(0, {"op": "wait", "ch": 0})
    assert not _C.plan.runs_with_packets(plan)


@pytest.mark.parametrize("collective", sorted(EXPECTED_ALGORITHMS["eager"]))
def test_eager_plans_use_scratch_banks_and_no_entry_signal(collective):
    from forestcc import _C
    for n in (2, 3, 5):
        plan = builtin.generate("eager", collective, n)
        assert plan["scratch_banks"] == 2
        limit = _C.plan.algorithm_max_bytes("eager", collective, n)
        assert plan["size_range"]["max_bytes"] == limit
        # a bank (1 MiB) holds one block from each of the N-1 peers
        blocks = 1 if collective == "all_reduce" else n
        assert limit == (1 << 20) // (n - 1) * blocks
        for entry in plan["ranks"]:   # the first op puts data: no "entered" signal first
            assert entry["workers"][0]["ops"][0]["op"] == ops.PUT_SIGNAL
    assert "scratch_banks" not in builtin.generate("direct", collective, 3)
    assert _C.plan.algorithm_max_bytes("direct", collective, 3) is None
    assert _C.plan.algorithm_max_bytes("eager", collective, 1) is None


def test_default_root_is_zero():
    assert builtin.generate("tree", "broadcast", 4)["root"] == 0
    assert builtin.generate("direct", "scatter", 4, root=3)["root"] == 3


def test_pipelining_hints():
    ring = builtin.generate("ring", "all_reduce", 4)
    assert ring["pipeline"]["max_slices"] > 1 and ring["pipeline"]["min_slice_bytes"] > 0
    small = builtin.generate("direct_small", "all_reduce", 4)
    assert small["pipeline"]["max_slices"] == 1
    # direct is never sliced: its reductions are tiled by the executor instead
    for collective in ("all_reduce", "reduce_scatter", "reduce", "all_gather"):
        assert builtin.generate("direct", collective, 4)["pipeline"]["max_slices"] == 1


def test_direct_reductions_read_peers_in_place():
    # get_reduce: no scratch, and every rank's part is reduced from all N-1 peers
    for collective in ("all_reduce", "reduce_scatter", "reduce"):
        plan = builtin.generate("direct", collective, 5, root=2 if collective == "reduce" else None)
        assert plan["buffers"]["scratch"] == 0
        for entry in plan["ranks"]:
            gets = [op for op in entry["workers"][0]["ops"] if op["op"] == "get_reduce"]
            assert len(gets) == 4


def test_out_of_place_ring_all_reduce_needs_no_scratch():
    # the partial sums travel through the receivers' outputs
    assert builtin.generate("ring", "all_reduce", 6)["buffers"]["scratch"] == 0
    in_place = builtin.generate("ring", "all_reduce", 6, in_place=True)
    assert in_place["buffers"]["scratch"] == 6 and _scratch_touched(in_place) == 5


# ----------------------------------------------------------------------------- bad requests

@pytest.mark.parametrize("args,kwargs,words", [
    (("nope", "all_reduce", 4), {}, ["unknown algorithm 'nope'", "ring", "direct", "bruck"]),
    (("ring", "all_to_all", 4), {}, ["'ring' does not implement all_to_all", "all_reduce"]),
    (("pairwise", "broadcast", 4), {}, ["'pairwise' does not implement broadcast",
                                        "all_to_all, sendrecv"]),
    (("ring", "all_reduce", 0), {}, ["nranks must be in 1..", "got 0"]),
    (("direct", "barrier", -3), {}, ["nranks must be in 1..", "got -3"]),
    (("tree", "broadcast", 4), {"root": 4}, ["root 4 is not a rank of 4 (0..3)", "tree"]),
    (("direct", "gather", 4), {"root": -2}, ["root -2 is not a rank of 4"]),
    (("ring", "all_reduce", 4), {"root": 1}, ["all_reduce takes no root"]),
    (("ring", "allreduce", 4), {}, ["unknown collective 'allreduce'", "all_reduce"]),
])
def test_generate_refuses_bad_requests(args, kwargs, words):
    with pytest.raises(ValueError) as info:
        builtin.generate(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_generate_checks_types():
    with pytest.raises(TypeError, match="nranks must be an int"):
        builtin.generate("ring", "all_reduce", 4.0)
    with pytest.raises(TypeError, match="root must be an int"):
        builtin.generate("tree", "reduce", 4, root="0")


# ----------------------------------------------------------------------------- command line

def test_cli_algorithms(capsys):
    assert plan_main(["algorithms"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[0] == "ring"
    assert "direct_small" in out and "all_to_all" in out
    assert plan_main(["algorithms", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert set(table["bruck"]) == EXPECTED_ALGORITHMS["bruck"]


def test_cli_dump_writes_valid_json(tmp_path, capsys):
    import jsonschema  # the test extra installs it: a missing one must fail, not skip
    schema = json.loads(SCHEMA.read_text())
    for algo, collective in PAIRS:
        path = tmp_path / f"{algo}-{collective}.json"
        args = ["dump", "--algo", algo, "--collective", collective, "--nranks", "5",
                "-o", str(path)]
        if collective in ops.ROOTED_COLLECTIVES:
            args += ["--root", "3"]
        assert plan_main(args + ["--in-place"]) == 0
        plan = load(path)
        jsonschema.validate(json.loads(path.read_text()), schema)
        assert plan == builtin.generate(algo, collective, 5,
                                        root=3 if "--root" in args else None, in_place=True)
        assert verify(plan).ok
    assert capsys.readouterr().out == ""
    # standard output by default
    assert plan_main(["dump", "--algo", "ring", "--collective", "all_gather", "--nranks", "3"]) == 0
    text = capsys.readouterr().out
    assert plan_format.loads(text, "<stdout>")["name"] == "ring_all_gather_3"


@pytest.mark.parametrize("args,message", [
    (["--algo", "ring", "--collective", "all_to_all", "--nranks", "4"], "does not implement"),
    (["--algo", "nope", "--collective", "all_reduce", "--nranks", "4"], "unknown algorithm"),
    (["--algo", "ring", "--collective", "all_reduce", "--nranks", "0"], "nranks must be"),
    (["--algo", "tree", "--collective", "gather", "--nranks", "4", "--root", "9"], "root 9"),
    (["--collective", "all_reduce", "--nranks", "4"], "--algo and --nranks are required"),
])
def test_cli_dump_errors(args, message, capsys):
    assert plan_main(["dump", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


def test_cli_dump_unknown_collective_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        plan_main(["dump", "--algo", "ring", "--collective", "allreduce", "--nranks", "2"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_cli_verify_generated(tmp_path, capsys):
    assert plan_main(["verify", "--algo", "halving_doubling", "--nranks", "6"]) == 0
    out = capsys.readouterr().out
    for collective in EXPECTED_ALGORITHMS["halving_doubling"]:
        assert f"halving_doubling_{collective}_6: OK" in out
        assert f"halving_doubling_{collective}_6_in_place: OK" in out
    # rooted: roots 0, N/2 and N-1 unless one is given
    assert plan_main(["verify", "-q", "--algo", "tree", "--nranks", "5",
                      "--collective", "scatter"]) == 0
    assert capsys.readouterr().out == ""
    assert plan_main(["verify", "--json", "--algo", "tree", "--nranks", "5", "--collective",
                      "gather", "--root", "4", "--out-of-place"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["file"] for r in reports] == ["tree_gather_5_root4"]
    assert reports[0]["ok"]


def test_cli_verify_files_and_generated_together(tmp_path, capsys):
    bad = builtin.generate("ring", "all_gather", 4)
    del bad["ranks"][2]["workers"][0]["ops"][1]
    path = tmp_path / "bad.json"
    plan_format.save(bad, path)
    assert plan_main(["verify", str(path), "--algo", "pairwise", "--nranks", "3"]) == 1
    out = capsys.readouterr().out
    assert "bad.json: " in out and "issue(s)" in out and "pairwise_all_to_all_3: OK" in out


@pytest.mark.parametrize("args,message", [
    ([], "give plan files, or --algo"),
    (["--algo", "ring"], "--algo needs --nranks"),
    (["--algo", "nope", "--nranks", "3"], "unknown algorithm 'nope'"),
    (["--algo", "ring", "--nranks", "3", "--collective", "gather"], "does not implement gather"),
])
def test_cli_verify_errors(args, message, capsys):
    assert plan_main(["verify", *args]) == 2
    assert message in capsys.readouterr().err


def test_forestcc_command_dumps_a_plan(tmp_path):
    path = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, "-c", "from forestcc.cli import main; main()", "plan",
                           "dump", "--algo", "bruck", "--collective", "all_to_all", "--nranks",
                           "7", "-o", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert verify(load(path)).ok


# ----------------------------------------------------------------------------- planted bugs

plans = st.builds(
    lambda pair, nranks, in_place, root: builtin.generate(
        pair[0], pair[1], nranks, in_place=in_place,
        root=root % nranks if pair[1] in ops.ROOTED_COLLECTIVES else None),
    st.sampled_from(PAIRS), st.integers(2, 9), st.booleans(), st.integers(0, 8))


@settings(max_examples=250, deadline=None)
@given(plan=plans, data=st.data())
def test_dropped_wait_is_caught(plan, data):
    check_dropped_wait(plan, data)


@settings(max_examples=200, deadline=None)
@given(plan=plans, data=st.data())
def test_dropped_signal_deadlocks(plan, data):
    check_dropped_signal(plan, data)


@settings(max_examples=300, deadline=None)
@given(plan=plans, data=st.data())
def test_wrong_chunk_index_is_caught(plan, data):
    check_wrong_chunk_index(plan, data)


@settings(max_examples=120, deadline=None)
@given(plan=plans, data=st.data())
def test_added_conflicting_put_races(plan, data):
    check_added_conflicting_put(plan, data)
