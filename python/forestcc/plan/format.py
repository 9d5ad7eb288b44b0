"""Plan files (format v1): load, validate, save.

Reading and validation are the C++ plan loader's (cpp/include/forestcc/plan_file.hpp, through
forestcc._C.plan), the one loader of C++ programs, the NCCL shim and this package. Validation is
structural: types, ranges, names, buffer sizes, chunk references in range, channel ownership and
pairing, and the format's limits (ops.MAX_*: slices, chunks, sizes, workers, channels, ops), so
that a plan that validates can also be loaded by the executor. Whether a plan computes its
collective (no deadlock, no race, right result) is the verifier's job. Every message names the
file and, where it applies, the rank, worker, step (op index), field and bad value. The loader
and the verifier share this one validator. Writing (dumps, save) stays here: plan dicts carry
free-form provenance that the C++ plan does not keep.
"""
from __future__ import annotations

import json
import os

from forestcc import _C

from . import ops
from .bulk import paused_gc


class PlanError(ValueError):
    """A plan file that cannot be read or is structurally invalid. `errors` lists every problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        shown = self.errors[:20]
        more = len(self.errors) - len(shown)
        super().__init__("\n".join(shown) + (f"\n... and {more} more errors" if more else ""))


def _limits() -> dict:
    """ops.MAX_* by name, read at each call (tests shrink them)."""
    return {name: getattr(ops, name) for name in _C.plan.LIMITS}


def _checked(outcome):
    """The value of a loader call's (value, errors), raising PlanError when it refused."""
    value, errors = outcome
    if errors:
        raise PlanError(errors)
    return value


def validation_errors(plan, source: str = "<plan>") -> list[str]:
    """Every structural problem of a plan dict, as messages; empty when the plan is valid."""
    return _C.plan.validation_errors(plan, source, _limits())


def validate(plan, source: str = "<plan>") -> dict:
    """Returns the plan when it is valid; raises PlanError listing every problem otherwise."""
    errors = validation_errors(plan, source)
    if errors:
        raise PlanError(errors)
    return plan


def _text(text):
    return bytes(text) if isinstance(text, bytearray) else text


def parse(text, source: str = "<plan>"):
    """The JSON value of a plan file's text (str or UTF-8 bytes), not yet validated. Raises
    PlanError naming the source, line and column when it is not JSON (invalid UTF-8, NaN and
    Infinity, nesting deeper than 512 levels and numbers longer than 4300 characters included)."""
    return _checked(_C.plan.parse_text(_text(text), source))


def loads(text, source: str = "<plan>") -> dict:
    """Parses and validates a plan from JSON text (str or UTF-8 bytes)."""
    with paused_gc():  # the loader makes a dict or list per op and ref (plan/bulk.py)
        return _checked(_C.plan.load_text(_text(text), source, _limits()))


def read_bytes(path) -> bytes:
    """A plan file's bytes; PlanError naming the file when it cannot be read or is larger than
    ops.MAX_FILE_BYTES."""
    return _checked(_C.plan.read_file(os.fsdecode(path), _limits()))


def load(path) -> dict:
    """Reads and validates a plan file. Raises PlanError (naming the file) on any problem."""
    return loads(read_bytes(path), os.fsdecode(path))


def canonical_op(op: dict) -> dict:
    """The op with keys in canonical order and the default n left out."""
    out = {key: op[key] for key in ops.OP_KEY_ORDER if key in op}
    if out.get("n") == ops.DEFAULT_N:
        del out["n"]
    return out


def dumps(plan: dict) -> str:
    """Canonical JSON text: keys in a fixed order, one channel or op per line, the rest compact.

    The same plan always gives the same text, so files diff well and hash stably."""
    def compact(value) -> str:
        return json.dumps(value, separators=(", ", ": "), sort_keys=True)

    # Nested objects of the header keep their documented key order; free-form params are sorted.
    key_orders = {"buffers": ops.BUFFERS, "size_range": ops.SIZE_RANGE_KEYS,
                  "pipeline": ops.PIPELINE_KEYS, "provenance": ops.PROVENANCE_KEYS}
    lines = ["{"]
    for key in ops.TOP_LEVEL_KEYS:
        if key not in plan or key == "ranks":
            continue
        value = plan[key]
        if key in key_orders:
            text = ", ".join(f'"{k}": {compact(value[k])}' for k in key_orders[key] if k in value)
            lines.append(f'  "{key}": {{{text}}},')
        else:
            lines.append(f'  "{key}": {compact(value)},')
    lines.append('  "ranks": [')
    for r, entry in enumerate(plan["ranks"]):
        lines.append(f'    {{"rank": {entry["rank"]}, "channels": [')
        channels = [compact({"id": c["id"], "peer": c["peer"], "transport": c["transport"]})
                    for c in entry["channels"]]
        lines.append(",\n".join(f"      {c}" for c in channels))
        lines.append('    ], "workers": [')
        workers = []
        for worker in entry["workers"]:
            op_lines = ",\n".join(
                "        " + json.dumps(canonical_op(op), separators=(", ", ": "))
                for op in worker["ops"])
            workers.append(f'      {{"id": {worker["id"]}, "ops": [\n{op_lines}\n      ]}}'
                           if op_lines else f'      {{"id": {worker["id"]}, "ops": []}}')
        lines.append(",\n".join(workers))
        blocks = entry.get("scratch_blocks")
        tail = f', "scratch_blocks": {compact([list(b) for b in blocks])}' if blocks else ""
        lines.append("    ]" + tail + "}" + ("," if r + 1 < len(plan["ranks"]) else ""))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(line for line in lines if line) + "\n"


def save(plan: dict, path, validate_first: bool = True) -> None:
    """Writes a plan as canonical JSON (validating it first unless told not to)."""
    if validate_first:
        validate(plan, os.fspath(path))
    text = dumps(plan)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
