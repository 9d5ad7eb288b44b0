"""The tuning table behind algo="auto": validation, and selection by memory kind in real jobs."""
from __future__ import annotations

import json

import pytest
from forestcc import tuning

from conftest import run_job


def _rule(**kw):
    rule = {"collective": "all_reduce", "min_ranks": 2, "max_ranks": 2, "min_bytes": 0,
            "max_bytes": None, "algorithm": "ring"}
    rule.update(kw)
    return rule


def test_memory_field_is_optional_and_checked():
    ok = {"version": 1, "source": "t", "rules": [_rule(), _rule(memory="shared"),
                                                  _rule(memory="private")]}
    tuning.validate_table(ok, "t")
    assert [row[6] for row in tuning.rules_for_engine(ok)] == [-1, 1, 0]
    with pytest.raises(ValueError, match="rule 0: memory must be one of private, shared"):
        tuning.validate_table({"version": 1, "source": "t", "rules": [_rule(memory="gpu")]}, "t")
    with pytest.raises(ValueError, match="rule 0: needs exactly the keys"):
        tuning.validate_table({"version": 1, "source": "t", "rules": [_rule(colour="red")]}, "t")


def test_in_place_field_is_optional_and_checked():
    ok = {"version": 1, "source": "t", "rules": [_rule(), _rule(in_place=True),
                                                  _rule(in_place=False, memory="private")]}
    tuning.validate_table(ok, "t")
    assert [row[6:] for row in tuning.rules_for_engine(ok)] == [(-1, -1), (-1, 1), (0, 0)]
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="rule 0: in_place must be true or false"):
            tuning.validate_table({"version": 1, "source": "t",
                                   "rules": [_rule(in_place=bad)]}, "t")


@pytest.mark.parametrize("table, message", [
    ([], "t: not a forestcc tuning table"),
    ({"version": 2, "rules": []}, "t: not a forestcc tuning table"),
    ({"version": 1, "rules": {}}, "t: 'rules' must be a list"),
    ({"version": 1, "rules": [_rule(collective="all_shuffle")]}, 'rule 0: unknown collective "all_shuffle"'),
    ({"version": 1, "rules": [_rule(), _rule(algorithm="magic")]}, 'rule 1: unknown algorithm "magic" .built-in: '),
    ({"version": 1, "rules": [_rule(min_ranks=-1)]}, "rule 0: min_ranks must be a non-negative integer"),
    ({"version": 1, "rules": [_rule(max_ranks=2.5)]}, "rule 0: max_ranks must be a non-negative integer"),
    ({"version": 1, "rules": [_rule(min_bytes="0")]}, "rule 0: min_bytes must be a non-negative integer"),
    ({"version": 1, "rules": [_rule(min_bytes=8, max_bytes=4)]}, "rule 0: max_bytes must be null or an integer >= min_bytes"),
    # all_to_all_v rules are checked too, though the engine drops them (all_to_all's serve it)
    ({"version": 1, "rules": [_rule(collective="all_to_all_v", algorithm="magic")]}, 'rule 0: unknown algorithm "magic"'),
    ({"version": 1, "rules": [_rule(max_bytes=float("inf"))]}, "t: not a forestcc tuning table .Out of range float"),
    # before, accepted: every call the rule chose failed, naming neither the file nor the rule
    ({"version": 1, "rules": [_rule(collective="all_reduce", algorithm="tree")]},
     "rule 0: algorithm 'tree' does not implement all_reduce .it implements "),
])
def test_every_table_error_names_source_and_rule(table, message):
    # validate_table is libforestcc's own check (parseTuningTable), so the engine refuses the same
    with pytest.raises(ValueError, match=message):
        tuning.validate_table(table, "t")


def test_validate_table_accepts_what_the_engine_loads():
    from forestcc import _C
    table = {"version": 1, "rules": [_rule(), _rule(collective="all_to_all_v", algorithm="pairwise")]}
    assert tuning.validate_table(table, "t") is table
    assert _C.plan.check_tuning_table(json.dumps(table), "t") == 1   # all_to_all_v's rule dropped


def test_auto_picks_by_placement(tmp_path):
    """In-place and out-of-place calls follow their own rules; a rule without in_place serves
    both (the memory-agnostic all_gather rule below)."""
    table = {"version": 1, "source": "test", "rules": [
        _rule(collective="all_to_all", in_place=True, algorithm="direct_small"),
        _rule(collective="all_to_all", in_place=False, algorithm="pairwise"),
        _rule(in_place=True, algorithm="ring"),
        _rule(in_place=False, algorithm="halving_doubling"),
        _rule(collective="all_gather", algorithm="bruck")]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(2, "tuning_placement.py", env={"FORESTCC_TUNING": str(path)})
    assert result.returncode == 0, result.stdout + result.stderr
    plans = {tuple(line.split()[1:3]): line.split()[3] for line in result.lines("PLAN")}
    assert set(plans) == {(c, p) for c in ("all_reduce", "all_to_all", "all_gather")
                          for p in ("in_place", "out_of_place")}, result.stdout
    expected = {("all_reduce", "in_place"): "ring_", ("all_reduce", "out_of_place"): "halving_doubling_",
                ("all_to_all", "in_place"): "direct_small_", ("all_to_all", "out_of_place"): "pairwise_",
                ("all_gather", "in_place"): "bruck_", ("all_gather", "out_of_place"): "bruck_"}
    for key, prefix in expected.items():
        assert plans[key].startswith(prefix), (key, plans[key])
    # the engine's choice by placement code; unknown placement matches neither rule
    assert all(line.split()[1:] == ["halving_doubling", "ring", "none"]
               for line in result.lines("choose")), result.stdout


def test_shipped_table_is_valid():
    table = tuning.load(tuning.default_path())
    assert table["rules"] and {r.get("memory") for r in table["rules"]} <= {None, "private",
                                                                             "shared"}
    # every (collective, ranks, memory) has rules for both placements or for each, each set
    # covering 0 bytes to unbounded without gaps
    groups: dict = {}
    for r in table["rules"]:
        groups.setdefault((r["collective"], r["min_ranks"], r["max_ranks"], r.get("memory")),
                          []).append(r)
    for key, rules in groups.items():
        placements = {r.get("in_place") for r in rules}
        assert placements in ({None}, {False, True}), (key, placements)
        for placement in placements:
            mine = [r for r in rules if r.get("in_place") == placement]
            assert mine[0]["min_bytes"] == 0 and mine[-1]["max_bytes"] is None, (key, placement)
            for a, b in zip(mine, mine[1:]):
                assert b["min_bytes"] == a["max_bytes"] + 1, (key, a, b)


def test_auto_picks_by_memory_kind(tmp_path):
    table = {"version": 1, "source": "test", "rules": [
        _rule(memory="device", algorithm="direct"),
        _rule(memory="shared", algorithm="ring"),
        _rule(memory="private", algorithm="halving_doubling")]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(2, "tuning_check.py", env={"FORESTCC_TUNING": str(path)})
    assert result.returncode == 0, result.stdout + result.stderr
    plans = result.lines("PLAN")
    assert len(plans) == 4, result.stdout
    for line in plans:
        _, memory, name = line.split()
        assert name.startswith("ring_" if memory == "shared" else "halving_doubling_"), line
    # the engine's choice by memory code; unknown memory matches neither rule
    assert all(line.split()[1:] == ["halving_doubling", "ring"]
               for line in result.lines("choose")), result.stdout
    assert [line.split()[1:] for line in result.lines("device")] == [["direct"]] * 2, result.stdout


def test_eager_rules_are_clamped_and_the_next_rule_takes_over(tmp_path):
    rule = {"collective": "all_reduce", "min_ranks": 1, "max_ranks": 64, "memory": "private"}
    table = {"version": 1, "source": "test", "rules": [
        {**rule, "min_bytes": 0, "max_bytes": 4 << 20, "algorithm": "eager"},
        {**rule, "min_bytes": (4 << 20) + 1, "max_bytes": None, "algorithm": "direct_small"}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(3, "tuning_clamp.py", env={"FORESTCC_TUNING": str(path)})
    assert result.returncode == 0, result.stdout + result.stderr
    limit = (1 << 20) // 2   # eager all_reduce on 3 ranks: a 1 MiB bank holds 2 vectors
    chosen = {int(line.split()[1]): line.split()[2] for line in result.lines("CHOOSE")}
    assert chosen == {8: "eager", limit: "eager", limit + 4: "direct_small",
                      4 << 20: "direct_small", (4 << 20) + 4: "direct_small"}, result.stdout


def test_eager_clamp_hands_sizes_to_the_same_placement(tmp_path):
    """Clamping an eager rule for one placement extends the next rule of that placement, not the
    other placement's."""
    rule = {"collective": "all_reduce", "min_ranks": 1, "max_ranks": 64, "memory": "private"}
    table = {"version": 1, "source": "test", "rules": [
        {**rule, "in_place": False, "min_bytes": 0, "max_bytes": 4 << 20, "algorithm": "eager"},
        {**rule, "in_place": False, "min_bytes": (4 << 20) + 1, "max_bytes": None,
         "algorithm": "ring"},
        {**rule, "in_place": True, "min_bytes": 0, "max_bytes": 4 << 20, "algorithm": "eager"},
        {**rule, "in_place": True, "min_bytes": (4 << 20) + 1, "max_bytes": None,
         "algorithm": "direct_small"}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    result = run_job(3, "tuning_clamp.py", env={"FORESTCC_TUNING": str(path)})
    assert result.returncode == 0, result.stdout + result.stderr
    limit = (1 << 20) // 2
    placed = {int(line.split()[1]): tuple(line.split()[2:]) for line in result.lines("PLACED")}
    assert placed == {8: ("eager", "eager"), limit: ("eager", "eager"),
                      limit + 4: ("ring", "direct_small"), 4 << 20: ("ring", "direct_small"),
                      (4 << 20) + 4: ("ring", "direct_small")}, result.stdout
    # without a placement the engine matches neither set
    assert all(line.split()[2] == "none" for line in result.lines("CHOOSE")), result.stdout
