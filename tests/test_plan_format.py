"""Plan format v1: geometry, canonical save/load, JSON schema, and every validation error path."""
from __future__ import annotations

import copy
import json
import pathlib
import re

import pytest
from forestcc.plan import (
    PlanBuilder,
    PlanError,
    dumps,
    geometry,
    load,
    loads,
    ops,
    reference,
    save,
    validate,
    validation_errors,
    verify,
)
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = pathlib.Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO / "schedules" / "plan.schema.json"
README_PATH = REPO / "schedules" / "README.md"


def _plan(collective=ops.ALL_REDUCE, nranks=4, in_place=False):
    return reference.reference_plan(collective, nranks, in_place, root=nranks // 2)


# ----------------------------------------------------------------------------- geometry

@given(c=st.integers(0, 50), k=st.integers(1, 12), blocks=st.integers(1, 5))
def test_chunks_tile_each_buffer_in_order(c, k, blocks):
    end = 0
    for i in range(blocks * k):
        start, stop = geometry.chunk_element_range(i, 1, c, k)
        assert start == end and stop >= start
        block, part = divmod(i, k)
        assert start == block * c + (part * c) // k
        end = stop
    assert end == blocks * c
    assert geometry.buffer_bytes(blocks * k, c, k, 4) == blocks * c * 4


@given(c=st.integers(0, 50), k=st.integers(1, 8), data=st.data())
def test_contiguous_chunks_are_one_range(c, k, data):
    index = data.draw(st.integers(0, 3 * k - 1))
    count = data.draw(st.integers(1, 3 * k - index))
    start, stop = geometry.chunk_element_range(index, count, c, k)
    assert start == geometry.chunk_element_range(index, 1, c, k)[0]
    assert stop == geometry.chunk_element_range(index + count - 1, 1, c, k)[1]
    assert geometry.chunk_byte_range(index, count, c, k, 8) == (start * 8, (stop - start) * 8)


@given(c=st.integers(0, 200), k=st.integers(1, 6), slices=st.integers(1, 9))
def test_slices_tile_every_chunk(c, k, slices):
    pieces = []
    for s in range(slices):
        pieces += geometry.op_slice_byte_ranges(0, k, c, k, 2, s, slices)
    covered = sorted((off, off + size) for off, size in pieces if size)
    position = 0
    for lo, hi in covered:
        assert lo == position
        position = hi
    assert position == c * 2


def test_slice_count_respects_limits():
    assert geometry.slice_count(8, 0, 1000, 4, 4) == 8
    assert geometry.slice_count(8, 100, 1000, 4, 4) == 8      # chunk of 1000 B -> 10 slices
    assert geometry.slice_count(8, 400, 1000, 4, 4) == 2      # 1000 // 400
    assert geometry.slice_count(8, 4096, 1000, 4, 4) == 1     # never fewer than one


@pytest.mark.parametrize("collective,blocks", [
    (ops.ALL_REDUCE, (1, 1)), (ops.BROADCAST, (1, 1)), (ops.REDUCE, (1, 1)),
    (ops.SENDRECV, (1, 1)), (ops.ALL_GATHER, (1, 5)), (ops.GATHER, (1, 5)),
    (ops.REDUCE_SCATTER, (5, 1)), (ops.SCATTER, (5, 1)), (ops.ALL_TO_ALL, (5, 5)),
    (ops.BARRIER, (0, 0)),
])
def test_buffer_blocks(collective, blocks):
    assert geometry.buffer_blocks(collective, 5) == blocks
    assert geometry.expected_buffer_chunks(collective, 5, 3) == {
        ops.INPUT: blocks[0] * 3, ops.OUTPUT: blocks[1] * 3}


def test_in_place_aliasing():
    assert geometry.alias_function(ops.ALL_REDUCE, True, 2, 4)(ops.INPUT, 3) == (ops.OUTPUT, 3)
    assert geometry.alias_function(ops.ALL_GATHER, True, 2, 4)(ops.INPUT, 3) == (ops.OUTPUT, 11)
    assert geometry.alias_function(ops.REDUCE_SCATTER, True, 2, 4)(ops.OUTPUT, 1) == (ops.INPUT, 9)
    assert geometry.alias_function(ops.SCATTER, True, 1, 2)(ops.INPUT, 1) == (ops.INPUT, 1)
    assert geometry.alias_function(ops.ALL_GATHER, False, 2, 4)(ops.INPUT, 3) == (ops.INPUT, 3)


# ----------------------------------------------------------------------------- save / load

@pytest.mark.parametrize("collective", ops.COLLECTIVES)
def test_save_load_round_trip(collective, tmp_path):
    plan = _plan(collective, 3)
    path = tmp_path / "plan.json"
    save(plan, path)
    loaded = load(path)
    assert loaded == plan
    assert dumps(loaded) == path.read_text()  # canonical: the same plan, the same text


def test_dumps_is_canonical_whatever_the_key_order():
    plan = _plan(ops.ALL_GATHER, 3)
    shuffled = json.loads(json.dumps(plan, sort_keys=True))
    for entry in shuffled["ranks"]:
        for worker in entry["workers"]:
            worker["ops"] = [dict(reversed(list(op.items()))) for op in worker["ops"]]
    assert dumps(shuffled) == dumps(plan)
    # the default n is left out; one op per line keeps diffs readable
    op = {"op": "put", "n": 1, "dst": ["output", 0], "src": ["input", 0], "ch": 0}
    assert json.dumps(op) not in dumps(plan)
    line = '{"op": "put_signal", "ch": 0, "src": ["output", 0], "dst": ["output", 0]}'
    assert line in dumps(plan)


def test_loads_rejects_bad_json_and_missing_files(tmp_path):
    with pytest.raises(PlanError, match="broken.json: not valid JSON"):
        loads("{", "broken.json")
    with pytest.raises(PlanError, match="nope.json: cannot read"):
        load(tmp_path / "nope.json")


def test_unknown_version_is_a_clear_error():
    plan = _plan()
    plan["version"] = 2
    errors = validation_errors(plan, "future.json")
    assert errors == ["future.json: unsupported plan version 2 (this forestcc reads version 1)"]


def test_validate_returns_the_plan_and_save_refuses_invalid_plans(tmp_path):
    plan = _plan()
    assert validate(plan) is plan
    plan["nranks"] = 0
    with pytest.raises(PlanError):
        save(plan, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


# ----------------------------------------------------------------------------- JSON schema

@pytest.fixture(scope="module")
def schema_validator():
    import jsonschema  # the test extra installs it: a missing one must fail, not skip
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("collective", ops.COLLECTIVES)
@pytest.mark.parametrize("in_place", [False, True])
def test_every_reference_plan_matches_the_schema(schema_validator, collective, in_place):
    for nranks in list(range(1, 9)) + [13, 16]:  # jsonschema is slow on big plans
        plan = reference.reference_plan(collective, nranks, in_place, root=nranks - 1)
        errors = [e.message for e in schema_validator.iter_errors(plan)]
        assert not errors, (collective, nranks, errors[:3])


def test_schema_names_match_ops_py():
    schema = json.loads(SCHEMA_PATH.read_text())
    defs = schema["$defs"]
    assert schema["properties"]["collective"]["enum"] == list(ops.COLLECTIVES)
    assert defs["chunk_ref"]["prefixItems"][0]["enum"] == list(ops.BUFFERS)
    assert defs["channel"]["properties"]["transport"]["enum"] == list(ops.TRANSPORTS)
    assert [ref["$ref"] for ref in defs["op"]["oneOf"]] == [f"#/$defs/op_{o}" for o in ops.OPS]
    for name, fields in ops.OP_FIELDS.items():
        op_schema = defs[f"op_{name}"]
        assert set(op_schema["properties"]) == {"op", *fields}
        assert set(op_schema["required"]) == {"op", *fields} - ops.OPTIONAL_FIELDS


def test_eager_plans_match_the_schema_and_round_trip(schema_validator, tmp_path):
    from forestcc.plan import builtin
    plan = builtin.generate("eager", ops.ALL_REDUCE, 3)
    assert plan["scratch_banks"] == 2
    assert not [e.message for e in schema_validator.iter_errors(plan)]
    save(plan, tmp_path / "eager.json")
    assert load(tmp_path / "eager.json") == plan
    plan["scratch_banks"] = 3
    assert list(schema_validator.iter_errors(plan))


def test_schema_rejects_structural_errors(schema_validator):
    plan = _plan()
    plan["ranks"][0]["workers"][0]["ops"][0]["bogus"] = 1
    assert list(schema_validator.iter_errors(plan))
    plan = _plan()
    del plan["collective"]
    assert list(schema_validator.iter_errors(plan))


# ----------------------------------------------------------------------------- README

def test_readme_worked_example_verifies(tmp_path):
    text = README_PATH.read_text()
    example = re.search(r"```json\n(.*?)```", text, re.DOTALL).group(1)
    path = tmp_path / "example.json"
    path.write_text(example)
    assert verify(load(path)).ok
    snippet = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - our own docs' example


# ----------------------------------------------------------------------------- validation errors

def _first_op(plan, rank=1, worker=0, step=1):
    return plan["ranks"][rank]["workers"][worker]["ops"][step]


# (description, mutation of a 4-rank ring all_reduce, expected message fragment)
OP_ERRORS = [
    ("bad channel", lambda op: op.update(ch=7), "'ch' 7 is not a channel of rank 1 (has 0..1)"),
    ("unknown op", lambda op: op.update(op="teleport"), "'op' 'teleport' is not one of"),
    ("unknown field", lambda op: op.update(colour="red"), "unknown field 'colour'"),
    ("missing field", lambda op: op.pop("ch"), "missing field 'ch'"),
    ("bad buffer", lambda op: op.update(op="copy", src=["stack", 0], dst=["output", 0])
     or op.pop("ch"), "'src' [\"stack\", 0] is not a chunk ref"),
    ("negative index", lambda op: op.update(op="copy", src=["input", -1], dst=["output", 0])
     or op.pop("ch"), "is not a chunk ref"),
    ("out of range", lambda op: op.update(op="copy", src=["input", 3], dst=["output", 0], n=2)
     or op.pop("ch"), ("'src' [\"input\", 3] with n=2 is out of range: chunks 3..4 of 'input', "
                      "which has 4 chunks")),
    ("n zero", lambda op: op.update(op="copy", src=["input", 0], dst=["output", 0], n=0)
     or op.pop("ch"), "'n' must be an integer >= 1, got 0"),
    ("empty srcs", lambda op: op.update(op="reduce", dst=["output", 0], srcs=[]) or op.pop("ch"),
     "'srcs' must be a non-empty list"),
    ("not an object", None, "an op must be an object"),
]


@pytest.mark.parametrize("description,mutate,fragment", OP_ERRORS, ids=[e[0] for e in OP_ERRORS])
def test_op_errors_name_file_rank_worker_step(description, mutate, fragment):
    plan = _plan(ops.ALL_REDUCE, 4)
    if mutate is None:
        plan["ranks"][1]["workers"][0]["ops"][1] = "put"
    else:
        mutate(_first_op(plan))
    errors = validation_errors(plan, "plan.json")
    assert errors, description
    assert errors[0].startswith("plan.json: rank 1, worker 0, step 1"), errors
    assert any(fragment in e for e in errors), errors


def test_example_message_from_the_spec():
    plan = _plan(ops.ALL_TO_ALL, 4)
    op = plan["ranks"][2]["workers"][0]["ops"][5]
    op["ch"] = 7
    assert validation_errors(plan, "plan.json") == [
        (f"plan.json: rank 2, worker 0, step 5 ({op['op']}): 'ch' 7 is not a channel of rank 2 "
        f"(has 0..2)")]


# (description, mutation of a whole 4-rank plan, expected fragment)
PLAN_ERRORS = [
    ("no name", lambda p: p.pop("name"), "missing field 'name'"),
    ("unknown top-level field", lambda p: p.update(colour=1), "unknown field 'colour'"),
    ("bad collective", lambda p: p.update(collective="allreduce"), "'collective' 'allreduce'"),
    ("nranks bool", lambda p: p.update(nranks=True), "'nranks' must be an integer >= 1"),
    ("in_place int", lambda p: p.update(in_place=1), "'in_place' must be true or false"),
    ("chunks 0", lambda p: p.update(chunks_per_block=0), "'chunks_per_block' must be an integer"),
    ("root for all_reduce", lambda p: p.update(root=0), "'root' is only allowed for rooted"),
    ("buffer size", lambda p: p["buffers"].update(output=3),
     "'output' is 3 chunks but all_reduce over 4 ranks with 4 chunks per block needs 4"),
    ("scratch negative", lambda p: p["buffers"].update(scratch=-1), "'scratch' must be an integer"),
    ("size range", lambda p: p["size_range"].update(min_bytes=10, max_bytes=5),
     "'max_bytes' 5 is below 'min_bytes' 10"),
    ("pipeline", lambda p: p["pipeline"].update(max_slices=0),
     "'max_slices' must be an integer >= 1"),
    ("scratch banks 3", lambda p: p.update(scratch_banks=3), "'scratch_banks' must be 1 or 2, got 3"),
    ("scratch banks str", lambda p: p.update(scratch_banks="2"),
     "'scratch_banks' must be 1 or 2, got '2'"),
    ("provenance", lambda p: p["provenance"].pop("generator"), "missing field 'generator'"),
    ("predicted time", lambda p: p["provenance"].update(predicted_time_us="fast"),
     "'predicted_time_us' must be a number"),
    ("ranks length", lambda p: p["ranks"].pop(), "'ranks' must be a list of 4 entries"),
    ("rank order", lambda p: p["ranks"][2].update(rank=3), "ranks[2]: 'rank' must be 2"),
    ("channel id", lambda p: p["ranks"][1]["channels"][1].update(id=5),
     "rank 1, channel 1: 'id' must be 1"),
    ("peer", lambda p: p["ranks"][1]["channels"][0].update(peer=4),
     "rank 1, channel 0: 'peer' 4 is not a rank (0..3)"),
    ("transport", lambda p: p["ranks"][1]["channels"][0].update(transport="ib"),
     "'transport' must be one of auto, shm, cuda_ipc, tcp, got 'ib'"),
    ("worker id", lambda p: p["ranks"][3]["workers"][0].update(id=1),
     "rank 3, worker 0: 'id' must be 0"),
    ("unpaired channel", lambda p: p["ranks"][1]["channels"].append(
        {"id": 2, "peer": 3, "transport": "auto"}),
     "rank 1 has 1 channel(s) to rank 3 but rank 3 has 0 to rank 1"),
    ("odd loopback", lambda p: p["ranks"][1]["channels"].append(
        {"id": 2, "peer": 1, "transport": "auto"}), "rank 1 has 1 loopback channel(s)"),
    ("channel shared by workers", lambda p: p["ranks"][1]["workers"].append(
        {"id": 1, "ops": [{"op": "signal", "ch": 0}]}),
     "rank 1, worker 1, step 0 (signal): channel 0 is already used by worker 0"),
]


@pytest.mark.parametrize("description,mutate,fragment", PLAN_ERRORS,
                         ids=[e[0] for e in PLAN_ERRORS])
def test_plan_errors(description, mutate, fragment):
    plan = _plan(ops.ALL_REDUCE, 4)
    mutate(plan)
    errors = validation_errors(plan, "plan.json")
    assert any(fragment in e for e in errors), errors
    assert all(e.startswith("plan.json: ") for e in errors)
    with pytest.raises(PlanError) as raised:
        validate(plan, "plan.json")
    assert fragment in str(raised.value)


@pytest.mark.parametrize("collective,mutate,fragment", [
    (ops.BROADCAST, lambda p: p.pop("root"), "'root' must be an integer >= 0"),
    (ops.GATHER, lambda p: p.update(root=4), "'root' 4 is not a rank (nranks is 4)"),
])
def test_root_errors(collective, mutate, fragment):
    plan = _plan(collective, 4)
    mutate(plan)
    assert any(fragment in e for e in validation_errors(plan, "p.json"))


def test_not_an_object():
    assert validation_errors([], "x.json") == ["x.json: a plan must be a JSON object, got array"]


_OP_CORRUPTIONS = [
    lambda op: op.update(ch=99),
    lambda op: op.update(op="jump"),
    lambda op: op.update(extra=True),
    lambda op: op.update(n=-2),
    lambda op: op.update(src=["input", 10_000]) if "src" in op else op.update(ch="0"),
    lambda op: op.update(dst=["scratch", "x"]) if "dst" in op else op.pop("ch"),
]


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(ops.COLLECTIVES), nranks=st.integers(2, 6),
       in_place=st.booleans(), data=st.data())
def test_any_corrupted_op_is_reported_at_its_location(collective, nranks, in_place, data):
    plan = reference.reference_plan(collective, nranks, in_place, root=0)
    places = [(r, w, s) for r, entry in enumerate(plan["ranks"])
              for w, worker in enumerate(entry["workers"]) for s in range(len(worker["ops"]))]
    rank, worker, step = data.draw(st.sampled_from(places))
    corrupt = data.draw(st.sampled_from(_OP_CORRUPTIONS))
    broken = copy.deepcopy(plan)
    corrupt(broken["ranks"][rank]["workers"][worker]["ops"][step])
    errors = validation_errors(broken, "p.json")
    assert any(e.startswith(f"p.json: rank {rank}, worker {worker}, step {step}")
               for e in errors), errors


def test_builder_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown collective"):
        PlanBuilder("allreduce", 2)
    with pytest.raises(ValueError, match="needs root"):
        PlanBuilder(ops.BROADCAST, 2)
    with pytest.raises(ValueError, match="takes no root"):
        PlanBuilder(ops.ALL_REDUCE, 2, root=0)
    b = PlanBuilder(ops.ALL_REDUCE, 1)
    with pytest.raises(ValueError, match="unknown transport"):
        b.channel(0, 0, transport="ib")
    w = b.worker(0)
    b.copy(0, w, ("input", 0), ("scratch", 2))
    assert b.build()["buffers"]["scratch"] == 3  # grows to fit the refs used


# ----------------------------------------------------------------------------- limits
# One validator for the loader and the verifier: beyond ops.MAX_* a plan is refused naming the
# field, before it can run for hours, grow the verifier without bound or reach pybind's casts.

def _ring2():
    return reference.ring_all_reduce(2)


def _many_workers(p):
    p["ranks"][0]["workers"] += [{"id": i, "ops": []}
                                 for i in range(len(p["ranks"][0]["workers"]), ops.MAX_WORKERS + 1)]


def _many_channels_to_a_peer(p):
    for rank, peer in ((0, 1), (1, 0)):
        channels = p["ranks"][rank]["channels"]
        channels += [{"id": i, "peer": peer, "transport": "auto"}
                     for i in range(len(channels), ops.MAX_CHANNELS_PER_PEER + 1)]


LIMIT_ERRORS = [
    ("max_slices 2**32+5", lambda p: p.update(pipeline={"max_slices": 2**32 + 5}),
     f"pipeline: 'max_slices' is 4294967301, above the limit of {ops.MAX_SLICES}"),
    ("max_slices 2**31-1", lambda p: p.update(pipeline={"max_slices": 2**31 - 1,
                                                        "min_slice_bytes": 0}),
     f"'max_slices' is 2147483647, above the limit of {ops.MAX_SLICES}"),
    ("min_slice_bytes", lambda p: p.update(pipeline={"min_slice_bytes": 2**64}),
     "'min_slice_bytes' is 18446744073709551616, above the limit"),
    ("chunks_per_block 2**33", lambda p: p.update(chunks_per_block=2**33),
     f"'chunks_per_block' is 8589934592, above the limit of {ops.MAX_CHUNKS}"),
    ("scratch", lambda p: p["buffers"].update(scratch=ops.MAX_CHUNKS + 1),
     f"buffers: 'scratch' is {ops.MAX_CHUNKS + 1}, above the limit"),
    ("nranks", lambda p: p.update(nranks=ops.MAX_RANKS + 1), "'nranks' is 65537, above the limit"),
    ("max_bytes", lambda p: p["size_range"].update(max_bytes=2**63),
     "size_range: 'max_bytes' is 9223372036854775808, above the limit"),
    ("n", lambda p: p["ranks"][0]["workers"][0]["ops"][-1].update(n=2**32),
     "'n' is 4294967296, above the limit"),
    ("workers", _many_workers, f"rank 0: has 2 channels and {ops.MAX_WORKERS + 1} workers"),
    ("channels per peer", _many_channels_to_a_peer,
     (f"rank 0: has {ops.MAX_CHANNELS_PER_PEER + 1} channels to rank 1; the executor takes at "
      f"most {ops.MAX_CHANNELS_PER_PEER} per peer")),
]


@pytest.mark.parametrize("description,mutate,fragment", LIMIT_ERRORS,
                         ids=[e[0] for e in LIMIT_ERRORS])
def test_limits_are_refused_naming_the_field(description, mutate, fragment):
    plan = _ring2()
    mutate(plan)
    errors = validation_errors(plan, "plan.json")
    assert any(fragment in e for e in errors), errors
    # the verifier shares the validator: an invalid plan, not a run that never ends
    assert {i.kind for i in verify(plan, "plan.json").issues} == {"invalid"}


def test_limits_admit_their_boundary():
    plan = _ring2()
    plan["pipeline"] = {"max_slices": ops.MAX_SLICES, "min_slice_bytes": ops.MAX_BYTES}
    plan["buffers"]["scratch"] = ops.MAX_CHUNKS
    plan["size_range"] = {"min_bytes": 0, "max_bytes": ops.MAX_BYTES}
    assert validation_errors(plan) == []


def test_total_ops_limit(monkeypatch):
    plan = _ring2()
    monkeypatch.setattr(ops, "MAX_OPS", 5)
    errors = validation_errors(plan, "plan.json")
    assert errors == ["plan.json: has more than 5 ops (the limit of a plan) by rank 0"]


def test_pipeline_fields_are_optional():
    for pipeline in ({}, {"max_slices": 4}, {"min_slice_bytes": 1024}):
        plan = _ring2()
        plan["pipeline"] = pipeline
        assert validation_errors(plan) == [], pipeline


@pytest.mark.parametrize("text,fragment", [
    ("[" * 100_000 + "]" * 100_000, "not valid JSON: 1:513: nesting deeper than 512 levels"),
    ('{"version": NaN}', "not valid JSON: 1:13: unexpected 'N', expected a value"),
    ('{"version": 1' + "0" * 5000 + "}", "not valid JSON: 1:13: number longer than 4300 characters"),
    (b'{"name": "\xff"}', "not valid JSON: 1:11: invalid UTF-8 (byte 0xff) in a string"),
])
def test_unreadable_files_are_plan_errors(tmp_path, text, fragment):
    path = tmp_path / "plan.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(PlanError, match=re.escape(f"{path}: {fragment}")):
        load(path)


def test_deep_json_is_exit_2_for_plan_verify(tmp_path, capsys):
    from forestcc.plan.cli import plan_main
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert plan_main(["verify", str(path)]) == 2
    assert f"{path}: not valid JSON: 1:513: nesting deeper than 512 levels" in capsys.readouterr().err


def test_file_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    save(_ring2(), path)
    monkeypatch.setattr(ops, "MAX_FILE_BYTES", path.stat().st_size - 1)
    with pytest.raises(PlanError, match="plan.json: unreadable: larger than"):
        load(path)


def test_deep_values_in_a_dict_are_reported_not_raised():
    plan = _ring2()
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    plan["name"] = deep
    assert validation_errors(plan) == [
        "<plan>: name[0][0][0][0][0][0][0]...: nested deeper than 512 levels"]


# ---- Engine.compile takes dicts through the same C++ loader: the same values refused, the field named

@pytest.fixture(scope="module")
def solo():
    import forestcc
    return forestcc.init(unique_id=forestcc.unique_id(), rank=0, size=1)


def _one_rank_plan():
    from forestcc.plan import builtin
    return builtin.generate("ring", "all_reduce", 1)


def _above(where, key, value, limit):
    return f"<plan>: {where + ': ' if where else ''}'{key}' is {value}, above the limit of {limit}"


@pytest.mark.parametrize("field,path,bad,good,message", [
    ("pipeline.max_slices", ("pipeline", "max_slices"), ops.MAX_SLICES + 1, ops.MAX_SLICES,
     _above("pipeline", "max_slices", ops.MAX_SLICES + 1, ops.MAX_SLICES)),
    ("pipeline.min_slice_bytes", ("pipeline", "min_slice_bytes"), ops.MAX_BYTES + 1,
     ops.MAX_BYTES, _above("pipeline", "min_slice_bytes", ops.MAX_BYTES + 1, ops.MAX_BYTES)),
    ("chunks_per_block", ("chunks_per_block",), ops.MAX_CHUNKS + 1, None,
     _above("", "chunks_per_block", ops.MAX_CHUNKS + 1, ops.MAX_CHUNKS)),
    ("buffers.scratch", ("buffers", "scratch"), ops.MAX_CHUNKS + 1, ops.MAX_CHUNKS,
     _above("buffers", "scratch", ops.MAX_CHUNKS + 1, ops.MAX_CHUNKS)),
    ("size_range.max_bytes", ("size_range", "max_bytes"), ops.MAX_BYTES + 1, ops.MAX_BYTES,
     _above("size_range", "max_bytes", ops.MAX_BYTES + 1, ops.MAX_BYTES)),
    ("nranks", ("nranks",), ops.MAX_RANKS + 1, None,
     _above("", "nranks", ops.MAX_RANKS + 1, ops.MAX_RANKS)),
    ("scratch_banks", ("scratch_banks",), 3, None, "<plan>: 'scratch_banks' must be 1 or 2, got 3"),
])
def test_cpp_loader_agrees_on_limits(solo, field, path, bad, good, message):
    for value, accepted in ((bad, False), (good, True)):
        if value is None:
            continue
        plan = _one_rank_plan()
        target = plan
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        assert (validation_errors(plan) == []) == accepted, (field, value)
        if accepted:
            solo._engine.compile(plan)
        else:
            with pytest.raises(ValueError, match=re.escape(message)):
                solo._engine.compile(plan)


@pytest.mark.parametrize("mutate,fragment", [
    (lambda p: p.update(pipeline={"max_slices": 2**32 + 5}),
     "pipeline: 'max_slices' is 4294967301, above the limit of 1024"),
    (lambda p: p["ranks"][0]["workers"][0]["ops"][0].update(n=True),
     "rank 0, worker 0, step 0 (copy): 'n' must be an integer >= 1, got true"),
    (lambda p: p["ranks"][0]["workers"][0]["ops"][0].update(src=["input", 2**40]),
     "rank 0, worker 0, step 0 (copy): 'src' [\"input\", 1099511627776] with n=1 is out of "
     "range: chunk 1099511627776 of 'input', which has 1 chunks"),
    (lambda p: p["ranks"][0]["workers"][0]["ops"][0].update(src=["input", 1]),
     "rank 0, worker 0, step 0 (copy): 'src' [\"input\", 1] with n=1 is out of range: chunk 1 "
     "of 'input', which has 1 chunks"),
    (lambda p: p["ranks"][0]["workers"][0]["ops"].append({"op": "signal", "ch": 70000}),
     "rank 0, worker 0, step 1 (signal): 'ch' 70000 is not a channel of rank 0 (has none)"),
    (lambda p: p.pop("buffers"), "missing field 'buffers'"),
    (lambda p: p.update(in_place=1), "'in_place' must be true or false, got 1"),
])
def test_cpp_loader_names_the_field(solo, mutate, fragment):
    """A dict that skipped the Python validator: a message naming the field, never a KeyError
    or pybind11's opaque cast error."""
    plan = _one_rank_plan()
    mutate(plan)
    with pytest.raises(ValueError, match=re.escape(f"<plan>: {fragment}")):
        solo._engine.compile(plan)


def test_cpp_loader_takes_the_pipeline_defaults(solo):
    for pipeline in ({}, {"max_slices": 2}, {"min_slice_bytes": 64}):
        plan = _one_rank_plan()
        plan["pipeline"] = pipeline
        solo._engine.compile(plan)  # a missing field was a bare KeyError at run time
    plan = _one_rank_plan()
    plan["provenance"]["params"] = {"huge": 2**70, "text": "x"}  # informational: left out
    solo._engine.compile(plan)
