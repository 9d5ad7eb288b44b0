"""The C++ plan loader (cpp/include/forestcc/plan_file.hpp) through its binding (forestcc._C.plan):
its JSON parser, the canonical writer, file reading, the conversion of plan dicts and the limits of
the fixed-size op record. The structural checks themselves are tested through
forestcc.plan.validation_errors in test_plan_format.py (one validator: the same code)."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest
from forestcc import _C
from forestcc.plan import PlanError, builtin, dumps, load, loads, ops, reference, save
from hypothesis import given, settings
from hypothesis import strategies as st


def _parse(text, source="t.json"):
    value, errors = _C.plan.parse_text(text, source)
    assert bool(errors) == (value is None) or value is None
    return value, errors


# ----------------------------------------------------------------------------- JSON parser

def test_values_read_as_python_reads_them():
    text = ('{"i": -7, "big": 18446744073709551615, "huge": 123456789012345678901234567890, '
            '"neg": -9223372036854775808, "f": 2.5e-3, "e": 1E2, "s": "a\\"b\\\\c\\/\\b\\f\\n\\r\\t", '
            '"u": "\\u00e9\\ud83d\\ude00\\u0000", "raw": "\u00e9\U0001f600", "t": true, '
            '"n": null, "a": [], "o": {}, "lone": "\\ud800x"}')
    value, errors = _parse(text)
    assert errors == []
    assert value == json.loads(text)
    assert list(value) == list(json.loads(text))  # members keep their order
    assert type(value["e"]) is float and type(value["huge"]) is int


# (text, message after "t.json: not valid JSON: "): every refusal of the parser, with its place
JSON_ERRORS = [
    ("", "1:1: unexpected end of input, expected a value"),
    ("[1, 2", "1:6: unexpected end of input, expected ',' or ']'"),
    ('{"a": 1', "1:8: unexpected end of input, expected ',' or '}'"),
    ('{"a" 1}', "1:6: expected ':' after a member name, found '1'"),
    ("{1: 2}", "1:2: expected a member name in quotes, found '1'"),
    ("[1 2]", "1:4: expected ',' or ']' in an array, found '2'"),
    ('{"a": 1 "b": 2}', "1:9: expected ',' or '}' in an object, found '\"'"),
    ("[1,]", "1:4: unexpected ']', expected a value"),
    ("[01]", "1:2: leading zero in a number"),
    ("-", "1:2: expected a digit in a number"),
    ("1.", "1:3: expected a digit after '.' in a number"),
    ("1e+", "1:4: expected a digit in a number's exponent"),
    ("[1e999]", "1:2: number 1e999 is out of range"),
    ("1" * 4301, "1:1: number longer than 4300 characters"),
    ('"a\tb"', "1:3: control character byte 0x09 in a string"),
    ('"\\x"', "1:3: bad escape \\x in a string"),
    (b'"\\\x80', "1:3: bad escape \\ followed by byte 0x80 in a string"),
    ('"\\u12g4"', "1:6: bad hex digit 'g' in a \\u escape"),
    ('"abc', "1:5: unexpected end of input in a string"),
    ('{\n  "a": 1,\n  "a": 2}', "3:3: duplicate member \"a\""),
    ("[1] x", "1:5: unexpected 'x' after the JSON value"),
    ("NaN", "1:1: unexpected 'N', expected a value"),
    ("[Infinity]", "1:2: unexpected 'I', expected a value"),
    (b'["\xc3\x28"]', "1:3: invalid UTF-8 (byte 0xc3) in a string"),
    (b'["\xed\xa0\x80"]', "1:3: invalid UTF-8 (byte 0xed) in a string"),  # an encoded surrogate
    (b'["\xe0\x80\x80"]', "1:3: invalid UTF-8 (byte 0xe0) in a string"),  # overlong
    (b"\xef\xbb\xbf{}", "1:1: unexpected byte 0xef, expected a value"),   # a byte-order mark
    ("[" * 513 + "]" * 513, "1:513: nesting deeper than 512 levels"),
]


@pytest.mark.parametrize("text,message", JSON_ERRORS, ids=[m for _, m in JSON_ERRORS])
def test_json_errors_name_the_line_and_column(text, message):
    value, errors = _parse(text)
    assert value is None
    assert errors == [f"t.json: not valid JSON: {message}"]


def test_the_deepest_nesting_allowed_is_read():
    assert _parse("[" * 512 + "]" * 512)[1] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=json_values, indent=st.sampled_from([None, 2]), ascii_only=st.booleans())
def test_any_json_reads_back_as_python_reads_it(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    parsed, errors = _parse(text)
    assert errors == []
    assert parsed == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64) | st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_are_a_value_or_a_located_error(data):
    """Never a crash or a Python exception: a value, or one message with line:column."""
    value, errors = _parse(data)
    if errors:
        assert len(errors) == 1 and re.match(r"t\.json: not valid JSON: \d+:\d+: ", errors[0])
    else:
        assert value == json.loads(data.decode("utf-8", "surrogatepass"))


# ----------------------------------------------------------------------------- plan files

def _plans():
    out = [builtin.generate(algo, coll, n, root=0 if coll == "broadcast" else None)
           for algo, coll in [("ring", "all_reduce"), ("direct", "all_gather"),
                              ("eager", "all_reduce"), ("tree", "broadcast"),
                              ("bruck", "all_to_all")] for n in (1, 3, 4)]
    out += [reference.reference_plan(c, 3, in_place, root=1)
            for c in ops.COLLECTIVES for in_place in (False, True)]
    return out


def test_cpp_writer_gives_the_canonical_text():
    for plan in _plans():
        if any(len(op.get("srcs", ())) > _C.plan.MAX_REDUCE_SOURCES for r in plan["ranks"]
               for w in r["workers"] for op in w["ops"]):
            continue
        # a C++ plan keeps integer params (booleans as 0/1): all it holds of the provenance
        params = plan["provenance"]["params"]
        params.update({k: int(v) for k, v in params.items() if isinstance(v, bool)})
        text = _C.plan.to_json(plan)
        assert text == dumps(plan), plan["name"]
        assert loads(text, "<cpp>") == plan


def test_save_load_round_trip_through_the_cpp_loader(tmp_path):
    for i, plan in enumerate(_plans()):
        path = tmp_path / f"p{i}.json"
        save(plan, path)
        assert load(path) == plan
        assert _C.plan.load_text(path.read_bytes(), str(path), None) == (plan, [])


def test_a_name_with_any_characters_round_trips(tmp_path):
    plan = builtin.generate("ring", "all_reduce", 2)
    plan["name"] = 'quote " backslash \\ tab \t é 😀 \x7f'
    assert _C.plan.to_json(plan) == dumps(plan)
    save(plan, tmp_path / "p.json")
    assert load(tmp_path / "p.json")["name"] == plan["name"]


def test_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    assert _C.plan.read_file(str(missing), None) == (
        None, [f"{missing}: cannot read: No such file or directory"])
    assert _C.plan.read_file(str(tmp_path), None) == (
        None, [f"{tmp_path}: not a regular file (a plan is read from a file, not a FIFO, socket or device)"])
    path = tmp_path / "p.json"
    path.write_text("{}")
    assert _C.plan.read_file(str(path), {"MAX_FILE_BYTES": 2}) == (b"{}", [])
    assert _C.plan.read_file(str(path), {"MAX_FILE_BYTES": 1}) == (
        None, [f"{path}: unreadable: larger than 1 bytes (the limit of a plan file)"])


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    # before, opening it waited for a writer, beyond any FORESTCC_TIMEOUT (algo="/path/to/fifo");
    # in a process of its own, so that a hang fails this test rather than the suite
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    code = f"from forestcc import _C; print(_C.plan.read_file({str(fifo)!r}, None))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == repr((None, [f"{fifo}: not a regular file (a plan is read from a file, not a FIFO, "
                                           "socket or device)"])), p.stdout


def test_limits_given_by_the_caller_are_applied():
    plan = builtin.generate("ring", "all_reduce", 2)
    text = dumps(plan)
    assert _C.plan.load_text(text, "p.json", None)[1] == []
    assert _C.plan.load_text(text, "p.json", {"MAX_RANKS": 1})[1] == [
        "p.json: 'nranks' is 2, above the limit of 1"]


# ----------------------------------------------------------------------------- plan dicts

@pytest.mark.parametrize("mutate,message", [
    (lambda p: p["ranks"][0]["workers"][0]["ops"][0].update(src=("input", 0)),
     "<plan>: ranks[0].workers[0].ops[0].src: a tuple is not a JSON value"),
    (lambda p: p["provenance"]["params"].update({1: 2}),
     "<plan>: provenance.params: a member name of type int (JSON names are strings)"),
    (lambda p: p.update(name={"x"}), "<plan>: name: a set is not a JSON value"),
    (lambda p: p.update(nranks=object()), "<plan>: nranks: a object is not a JSON value"),
])
def test_dicts_that_are_not_json_are_refused_naming_the_place(mutate, message):
    plan = builtin.generate("ring", "all_reduce", 2)
    mutate(plan)
    errors = _C.plan.validation_errors(plan, "<plan>", None)
    assert len(errors) == 1 and errors[0].startswith(message), errors
    with pytest.raises(PlanError, match=re.escape(message)):
        from forestcc.plan import validate
        validate(plan)


def test_non_finite_predicted_time_is_refused():
    for bad in (math.nan, math.inf, -1.0):
        plan = builtin.generate("ring", "all_reduce", 2)
        plan["provenance"]["predicted_time_us"] = bad
        errors = _C.plan.validation_errors(plan, "p", None)
        assert errors == [f"p: provenance: 'predicted_time_us' must be a number >= 0 or null, "
                          f"got {'-1.0' if bad == -1.0 else errors[0].split('got ')[1]}"], errors


# ----------------------------------------------------------------------------- the op record

@pytest.fixture(scope="module")
def solo():
    import forestcc
    return forestcc.init(unique_id=forestcc.unique_id(), rank=0, size=1)


def _one_rank(op, loopback=False):
    plan = builtin.generate("ring", "all_reduce", 1)
    if loopback:
        plan["ranks"][0]["channels"] = [{"id": 0, "peer": 0, "transport": "auto"},
                                        {"id": 1, "peer": 0, "transport": "auto"}]
    plan["ranks"][0]["workers"][0]["ops"] = [op]
    return plan


@pytest.mark.parametrize("name,limit,loopback", [("reduce", 8, False), ("get_reduce", 7, True)])
def test_more_reduce_sources_than_the_op_record_holds_are_refused(solo, name, limit, loopback):
    def op(sources):
        out = {"op": name, "dst": ["output", 0], "srcs": [["input", 0]] * sources}
        if name == "get_reduce":
            out.update(ch=0, src=["input", 0])
        return out
    solo._engine.compile(_one_rank(op(limit), loopback))  # the most it holds
    plan = _one_rank(op(limit + 1), loopback)
    from forestcc.plan import validation_errors
    assert validation_errors(plan) == []  # a valid plan (the verifier reads it)...
    with pytest.raises(ValueError, match=re.escape(  # ...that the executor cannot hold
            f"<plan>: rank 0, worker 0, step 0 ({name}): 'srcs' has {limit + 1} chunk refs; "
            f"the executor takes at most {limit} (chain reduces)")):
        solo._engine.compile(plan)


def test_a_refusal_lists_twenty_problems_and_counts_the_rest(solo):
    plan = builtin.generate("ring", "all_reduce", 1)
    plan["ranks"][0]["workers"][0]["ops"] = [{"op": "copy", "src": ["input", 5 + i],
                                             "dst": ["output", 0]} for i in range(25)]
    with pytest.raises(ValueError) as raised:
        solo._engine.compile(plan)
    lines = str(raised.value).splitlines()
    assert len(lines) == 21 and lines[-1] == "... and 5 more errors"
    assert lines[0].startswith("<plan>: rank 0, worker 0, step 0 (copy): 'src'")
    assert lines[19].startswith("<plan>: rank 0, worker 0, step 19 (copy): 'src'")


# ------------------------------------------------------------------ loading rank by rank

def _ranks_first(plan) -> dict:
    """The same plan with "ranks" as its first member: the loader then checks it whole."""
    return {"ranks": plan["ranks"], **{k: v for k, v in plan.items() if k != "ranks"}}


def _unknown_member_first() -> dict:
    plan = builtin.generate("ring", "all_reduce", 4)
    return {"colour": "red", **plan}


def _broken_plans():
    def edited(edit, plan=None):
        plan = json.loads(dumps(plan or builtin.generate("ring", "all_reduce", 4)))
        edit(plan)
        return plan
    big = builtin.generate("direct", "all_reduce", 6)
    return [
        ("valid", builtin.generate("ring", "all_reduce", 4), None),
        ("valid, in place", builtin.generate("bruck", "all_to_all", 5, in_place=True), None),
        ("a rank entry wrong", edited(lambda p: p["ranks"][2]["workers"][0]["ops"][0].update(ch=99)), None),
        ("entries in two ranks wrong", edited(lambda p: (p["ranks"][1].update(rank=7),
                                                          p["ranks"][3].update(extra=1))), None),
        ("a rank too few", edited(lambda p: p["ranks"].pop()), None),
        ("a rank too many, also wrong", edited(lambda p: p["ranks"].append({"rank": 9})), None),
        ("channels that do not pair", edited(lambda p: p["ranks"][0]["channels"].pop()), None),
        ("a header error", edited(lambda p: p.update(chunks_per_block=0)), None),
        ("an unknown member", edited(lambda p: p.update(colour="red")), None),
        ("an unknown member before the ranks", _unknown_member_first(), None),
        ("an optional member after the ranks", edited(lambda p: p.update(scratch_banks=1)), None),
        ("over the op limit", big, {"MAX_OPS": 40}),
        ("over the channel limit", big, {"MAX_CHANNELS": 3}),
    ]


@pytest.mark.parametrize("case", range(len(_broken_plans())))
def test_loading_rank_by_rank_gives_what_the_whole_document_gives(case):
    # The loader validates and converts a plan's rank entries as it parses them when "ranks" is
    # the plan's last member (so it never holds the whole JSON tree); the result, the errors and
    # their order must be those of checking the whole document.
    _, plan, limits = _broken_plans()[case]
    loads = _C.plan.rank_by_rank_loads()
    streamed = _C.plan.load_text(json.dumps(plan), "p.json", limits)
    # Rank by rank exactly when "ranks" is last (a later member sends the load to the whole
    # document, after the header checked out on what came before the ranks, in one case above).
    assert _C.plan.rank_by_rank_loads() == loads + (list(plan)[-1] == "ranks")
    whole = _C.plan.load_text(json.dumps(_ranks_first(plan)), "p.json", limits)
    assert _C.plan.rank_by_rank_loads() == loads + (list(plan)[-1] == "ranks")
    assert streamed[1] == whole[1] == _C.plan.validation_errors(plan, "p.json", limits)
    if whole[0] is None:
        assert streamed[0] is None
    else:
        assert streamed[0] == whole[0] == plan
        assert list(streamed[0]) == list(plan)  # members in file order


def test_a_syntax_error_after_rank_entries_is_the_error():
    text = dumps(builtin.generate("ring", "all_reduce", 4))
    broken = text[:text.rindex("]")] + "]]}"
    _, errors = _C.plan.load_text(broken, "p.json", None)
    assert len(errors) == 1 and errors[0].startswith("p.json: not valid JSON: ")


def test_a_second_ranks_member_is_a_syntax_error_either_way():
    # The streamed "ranks" stays in the tree (an empty list), so a duplicate is refused as the
    # whole-document parse refuses it, not appended to the first one's entries.
    text = dumps(builtin.generate("ring", "all_reduce", 4))
    ranks = text[text.index('"ranks"'):text.rindex("}")]
    for doubled in (text[:text.rindex("}")] + ", " + ranks + "}",
                    "{" + ranks + ", " + text[1:]):
        _, errors = _C.plan.load_text(doubled, "p.json", None)
        assert len(errors) == 1 and "duplicate member" in errors[0], errors
