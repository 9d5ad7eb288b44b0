"""Plan files (format v1): load, validate, save.

Validation here is structural: types, ranges, names, buffer sizes, chunk references in range,
channel ownership and pairing, and the format's limits (ops.MAX_*: slices, chunks, sizes,
workers, channels, ops), so that a plan that validates can also be loaded by the executor. Whether
a plan computes its collective (no deadlock, no race, right result) is the verifier's job. Every
message names the file and, where it applies, the rank, worker, step (op index), field and bad
value. The loader and the verifier share this one validator.
"""
from __future__ import annotations

import json
import os

from . import geometry, ops


class PlanError(ValueError):
    """A plan file that cannot be read or is structurally invalid. `errors` lists every problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        shown = self.errors[:20]
        more = len(self.errors) - len(shown)
        super().__init__("\n".join(shown) + (f"\n... and {more} more errors" if more else ""))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, str) else repr(value)
    except (RecursionError, TypeError, ValueError):  # too deep, or not JSON at all (a dict
        text = f"<{type(value).__name__}>"          # handed in from Python)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    """Collects errors with a location prefix; a plan stops being checked after `limit` errors."""

    def __init__(self, source: str, limit: int = 200):
        self.source = source
        self.errors: list[str] = []
        self.limit = limit

    def error(self, where: str, message: str) -> None:
        if len(self.errors) < self.limit:
            self.errors.append(f"{self.source}: {where + ': ' if where else ''}{message}")

    def bad(self, where: str, key: str, value, wanted: str) -> None:
        """Reports a field whose value is not what the format wants."""
        self.error(where, f"{key!r} must be {wanted}, got {_show(value)}")

    def int_field(self, obj: dict, key: str, where: str, minimum: int = 0,
                  nullable: bool = False, maximum: int | None = None) -> bool:
        value = obj.get(key)
        if value is None and nullable and key in obj:
            return True
        if not _is_int(value) or value < minimum:
            self.error(where, f"{key!r} must be an integer >= {minimum}, got {_show(value)}")
            return False
        if maximum is not None and value > maximum:
            self.error(where, f"{key!r} is {_show(value)}, above the limit of {maximum}")
            return False
        return True

    def keys(self, obj: dict, allowed, required, where: str) -> None:
        for key in obj:
            if key not in allowed:
                self.error(where, f"unknown field {key!r}")
        for key in required:
            if key not in obj:
                self.error(where, f"missing field {key!r}")


def validation_errors(plan, source: str = "<plan>") -> list[str]:
    """Every structural problem of a plan dict, as messages; empty when the plan is valid."""
    check = _Checker(source)
    if not isinstance(plan, dict):
        check.error("", f"a plan must be a JSON object, got {type(plan).__name__}")
        return check.errors
    version = plan.get("version")
    if version != ops.FORMAT_VERSION:
        check.error("", f"unsupported plan version {_show(version)} "
                        f"(this forestcc reads version {ops.FORMAT_VERSION})")
        return check.errors
    required = [key for key in ops.TOP_LEVEL_KEYS if key not in ops.OPTIONAL_TOP_LEVEL_KEYS]
    check.keys(plan, ops.TOP_LEVEL_KEYS, required, "")
    if not isinstance(plan.get("name"), str):
        check.error("", f"'name' must be a string, got {_show(plan.get('name'))}")
    collective = plan.get("collective")
    if collective not in ops.COLLECTIVES:
        check.error("", f"'collective' {_show(collective)} is not one of "
                        f"{', '.join(ops.COLLECTIVES)}")
    if not isinstance(plan.get("in_place"), bool):
        check.error("", f"'in_place' must be true or false, got {_show(plan.get('in_place'))}")
    ok_sizes = check.int_field(plan, "nranks", "", 1, maximum=ops.MAX_RANKS)
    ok_sizes = check.int_field(plan, "chunks_per_block", "", 1, maximum=ops.MAX_CHUNKS) and ok_sizes
    if collective in ops.ROOTED_COLLECTIVES:
        if check.int_field(plan, "root", "", 0) and ok_sizes and plan["root"] >= plan["nranks"]:
            check.error("", f"'root' {plan['root']} is not a rank (nranks is {plan['nranks']})")
    elif "root" in plan and collective in ops.COLLECTIVES:
        check.error("", f"'root' is only allowed for rooted collectives, not {collective}")
    _check_buffers(check, plan, ok_sizes and collective in ops.COLLECTIVES)
    _check_size_range(check, plan.get("size_range"))
    _check_pipeline(check, plan.get("pipeline", ops.DEFAULT_PIPELINE))
    banks = plan.get("scratch_banks", 1)
    if not _is_int(banks) or banks not in ops.SCRATCH_BANKS:
        check.error("", f"'scratch_banks' must be 1 or 2, got {_show(banks)}")
    _check_provenance(check, plan.get("provenance"))
    if check.errors:  # the rank programs are only checked against a sound header
        return check.errors
    _check_ranks(check, plan)
    return check.errors


def _check_buffers(check: _Checker, plan: dict, header_ok: bool) -> None:
    buffers = plan.get("buffers")
    if not isinstance(buffers, dict):
        check.error("", f"'buffers' must be an object, got {_show(buffers)}")
        return
    check.keys(buffers, ops.BUFFERS, ops.BUFFERS, "buffers")
    ok = True
    for name in ops.BUFFERS:
        if name in buffers:
            ok = check.int_field(buffers, name, "buffers", 0, maximum=ops.MAX_CHUNKS) and ok
    if not header_ok or not ok:
        return
    expected = geometry.expected_buffer_chunks(
        plan["collective"], plan["nranks"], plan["chunks_per_block"])
    for name, chunks in expected.items():
        if _is_int(buffers.get(name)) and buffers[name] != chunks:
            check.error("buffers", f"{name!r} is {buffers[name]} chunks but {plan['collective']} "
                                   f"over {plan['nranks']} ranks with {plan['chunks_per_block']} "
                                   f"chunks per block needs {chunks}")


def _check_size_range(check: _Checker, size_range) -> None:
    if not isinstance(size_range, dict):
        check.error("", f"'size_range' must be an object, got {_show(size_range)}")
        return
    check.keys(size_range, ops.SIZE_RANGE_KEYS, ops.SIZE_RANGE_KEYS, "size_range")
    if (check.int_field(size_range, "min_bytes", "size_range", 0, maximum=ops.MAX_BYTES)
            and check.int_field(size_range, "max_bytes", "size_range", 0, nullable=True,
                                maximum=ops.MAX_BYTES)
            and size_range.get("max_bytes") is not None
            and size_range["max_bytes"] < size_range["min_bytes"]):
        check.error("size_range", f"'max_bytes' {size_range['max_bytes']} is below "
                                  f"'min_bytes' {size_range['min_bytes']}")


def _check_pipeline(check: _Checker, pipeline) -> None:
    if not isinstance(pipeline, dict):
        check.error("", f"'pipeline' must be an object, got {_show(pipeline)}")
        return
    check.keys(pipeline, ops.PIPELINE_KEYS, (), "pipeline")
    if "max_slices" in pipeline:
        check.int_field(pipeline, "max_slices", "pipeline", 1, maximum=ops.MAX_SLICES)
    if "min_slice_bytes" in pipeline:
        check.int_field(pipeline, "min_slice_bytes", "pipeline", 0, maximum=ops.MAX_BYTES)


def _check_provenance(check: _Checker, provenance) -> None:
    if not isinstance(provenance, dict):
        check.error("", f"'provenance' must be an object, got {_show(provenance)}")
        return
    check.keys(provenance, ops.PROVENANCE_KEYS, ("generator",), "provenance")
    if not isinstance(provenance.get("generator"), str):
        check.bad("provenance", "generator", provenance.get("generator"), "a string")
    if not isinstance(provenance.get("params", {}), dict):
        check.bad("provenance", "params", provenance.get("params"), "an object")
    fingerprint = provenance.get("topology_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        check.bad("provenance", "topology_fingerprint", fingerprint, "a string or null")
    predicted = provenance.get("predicted_time_us")
    if predicted is not None and (not _is_number(predicted) or predicted < 0):
        check.bad("provenance", "predicted_time_us", predicted, "a number >= 0 or null")


def _check_ranks(check: _Checker, plan: dict) -> None:
    nranks = plan["nranks"]
    ranks = plan.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != nranks:
        got = f"{len(ranks)} entries" if isinstance(ranks, list) else _show(ranks)
        check.error("", f"'ranks' must be a list of {nranks} entries (one per rank), got {got}")
        return
    sizes = dict(plan["buffers"])
    k = plan.get("chunks_per_block")
    sizes[_PARTS] = k if _is_int(k) and k >= 1 else 1
    # (rank, peer) -> number of channels from rank to peer, for the pairing check
    channel_counts: dict = {}
    total_ops = 0
    for position, entry in enumerate(ranks):
        where = f"ranks[{position}]"
        if not isinstance(entry, dict):
            check.error(where, f"must be an object, got {_show(entry)}")
            continue
        check.keys(entry, ("rank", "channels", "workers"), ("rank", "channels", "workers"), where)
        if entry.get("rank") != position:
            check.bad(where, "rank", entry.get("rank"), f"{position} (ranks are listed in order)")
            continue
        where = f"rank {position}"
        channels = entry.get("channels")
        workers = entry.get("workers")
        if not isinstance(channels, list) or not isinstance(workers, list):
            check.error(where, "'channels' and 'workers' must be lists")
            continue
        if len(channels) > ops.MAX_CHANNELS or len(workers) > ops.MAX_WORKERS:
            check.error(where, f"has {len(channels)} channels and {len(workers)} workers; the "
                               f"limits are {ops.MAX_CHANNELS} channels and {ops.MAX_WORKERS} "
                               f"workers per rank")
            continue
        total_ops += sum(len(w["ops"]) for w in workers
                         if isinstance(w, dict) and isinstance(w.get("ops"), list))
        if total_ops > ops.MAX_OPS:
            check.error("", f"has more than {ops.MAX_OPS} ops (the limit of a plan) by rank "
                            f"{position}")
            return
        peers = _check_channels(check, channels, position, nranks, where, channel_counts)
        _check_workers(check, workers, position, peers, sizes, where)
    for (rank, peer), count in sorted(channel_counts.items()):
        back = channel_counts.get((peer, rank), 0)
        if count > ops.MAX_CHANNELS_PER_PEER:
            to = "loopback channels" if rank == peer else f"channels to rank {peer}"
            check.error(f"rank {rank}", f"has {count} {to}; the executor takes at most "
                                        f"{ops.MAX_CHANNELS_PER_PEER} per peer")
        if rank == peer and count % 2:
            check.error("", f"rank {rank} has {count} loopback channel(s); loopback channels "
                            f"pair up in id order, so their number must be even")
        elif rank != peer and back != count and (rank < peer or back == 0):
            check.error("", f"rank {rank} has {count} channel(s) to rank {peer} but rank {peer} "
                            f"has {back} to rank {rank}; the i-th channel each way pair up")


def _check_channels(check, channels, rank, nranks, where, channel_counts) -> list:
    """Validates a rank's channel list; returns each channel's peer (None where invalid)."""
    peers: list = []
    for position, channel in enumerate(channels):
        here = f"{where}, channel {position}"
        peers.append(None)
        if not isinstance(channel, dict):
            check.error(here, f"must be an object, got {_show(channel)}")
            continue
        check.keys(channel, ("id", "peer", "transport"), ("id", "peer", "transport"), here)
        if channel.get("id") != position:
            check.bad(here, "id", channel.get("id"),
                      f"{position} (channels are listed in id order)")
        if channel.get("transport") not in ops.TRANSPORTS:
            check.bad(here, "transport", channel.get("transport"),
                      f"one of {', '.join(ops.TRANSPORTS)}")
        peer = channel.get("peer")
        if not _is_int(peer) or not 0 <= peer < nranks:
            check.error(here, f"'peer' {_show(peer)} is not a rank (0..{nranks - 1})")
            continue
        peers[position] = peer
        channel_counts[(rank, peer)] = channel_counts.get((rank, peer), 0) + 1
    return peers


def _check_workers(check, workers, rank, peers, sizes, where) -> None:
    owner: dict = {}  # channel id -> the worker that first used it
    for position, worker in enumerate(workers):
        here = f"{where}, worker {position}"
        if not isinstance(worker, dict):
            check.error(here, f"must be an object, got {_show(worker)}")
            continue
        check.keys(worker, ("id", "ops"), ("id", "ops"), here)
        if worker.get("id") != position:
            check.bad(here, "id", worker.get("id"), f"{position} (workers are listed in id order)")
        op_list = worker.get("ops")
        if not isinstance(op_list, list):
            check.error(here, f"'ops' must be a list, got {_show(op_list)}")
            continue
        for step, op in enumerate(op_list):
            channel = _check_op(check, op, rank, peers, sizes, f"{here}, step {step}")
            if channel is None:
                continue
            first = owner.setdefault(channel, position)
            if first != position:
                check.error(f"{here}, step {step} ({op['op']})",
                            f"channel {channel} is already used by worker {first}; a channel "
                            f"belongs to one worker")


def _check_op(check, op, rank, peers, sizes, where) -> int | None:
    """Validates one op; returns its channel id when it has a valid one."""
    if not isinstance(op, dict):
        check.error(where, f"an op must be an object, got {_show(op)}")
        return None
    name = op.get("op")
    fields = ops.OP_FIELDS.get(name)
    if fields is None:
        check.error(where, f"'op' {_show(name)} is not one of {', '.join(ops.OPS)}")
        return None
    where = f"{where} ({name})"
    required = [f for f in fields if f not in ops.OPTIONAL_FIELDS]
    check.keys(op, ("op",) + fields, required, where)
    count = op.get("n", ops.DEFAULT_N)
    if "n" in op and not check.int_field(op, "n", where, 1, maximum=ops.MAX_CHUNKS):
        count = 1
    channel = None
    if "ch" in op:
        value = op["ch"]
        if not _is_int(value) or not 0 <= value < len(peers):
            has = f"0..{len(peers) - 1}" if peers else "none"
            check.error(where, f"'ch' {_show(value)} is not a channel of rank {rank} (has {has})")
        else:
            channel = value
    for field in ops.REF_FIELDS:
        if field in op:
            _check_ref(check, op[field], count, sizes, where, field)
    if ops.REF_LIST_FIELD in op:
        refs = op[ops.REF_LIST_FIELD]
        if not isinstance(refs, list) or not refs:
            check.error(where, f"'srcs' must be a non-empty list of chunk refs, got {_show(refs)}")
        else:
            for position, ref in enumerate(refs):
                _check_ref(check, ref, count, sizes, where, f"srcs[{position}]")
    _check_parts(check, op, sizes, where)
    return channel


# Key of chunks_per_block in the sizes dict the op checks receive.
_PARTS = "#chunks_per_block"


def _check_parts(check, op, sizes, where) -> None:
    """Chunks of different part indices differ in length when the count does not divide by
    chunks_per_block, so an op may pair only chunks of the same part (index mod k)."""
    k = sizes[_PARTS]
    refs = [op[f] for f in ops.REF_FIELDS if f in op] + list(op.get(ops.REF_LIST_FIELD) or [])
    parts = {ref[1] % k for ref in refs
             if isinstance(ref, list) and len(ref) == 2 and _is_int(ref[1]) and ref[1] >= 0}
    if len(parts) > 1:
        check.error(where, f"pairs chunks of different parts {sorted(parts)} (index mod "
                           f"chunks_per_block={k}); their lengths differ when the count does "
                           f"not divide by {k}: use chunk indices with the same remainder")


def _check_ref(check, ref, count, sizes, where, field) -> None:
    if (not isinstance(ref, list) or len(ref) != 2 or ref[0] not in ops.BUFFERS
            or not _is_int(ref[1]) or ref[1] < 0):
        check.error(where, f"{field!r} {_show(ref)} is not a chunk ref [buffer, index >= 0] "
                           f"with buffer one of {', '.join(ops.BUFFERS)}")
        return
    buffer, index = ref
    size = sizes[buffer]
    if index + count > size:
        span = f"chunks {index}..{index + count - 1}" if count > 1 else f"chunk {index}"
        check.error(where, f"{field!r} {_show(ref)} with n={count} is out of range: {span} of "
                           f"{buffer!r}, which has {size} chunks")


def validate(plan, source: str = "<plan>") -> dict:
    """Returns the plan when it is valid; raises PlanError listing every problem otherwise."""
    errors = validation_errors(plan, source)
    if errors:
        raise PlanError(errors)
    return plan


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _unreadable(source: str, why: str) -> PlanError:
    return PlanError([f"{source}: unreadable: {why}"])


def parse(text, source: str = "<plan>"):
    """The JSON value of a plan file's text (str or UTF-8 bytes), not yet validated. Raises
    PlanError naming the source when it is unreadable: not UTF-8, not JSON (NaN and Infinity
    included), nested too deeply for the parser, or a number too long to convert."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        return json.loads(text, parse_constant=_refuse_constant)
    except UnicodeDecodeError as error:
        raise _unreadable(source, f"not UTF-8 text ({error.reason} at byte {error.start})") \
            from None
    except json.JSONDecodeError as error:
        raise PlanError([f"{source}: not valid JSON: {error}"]) from None
    except RecursionError:
        raise _unreadable(source, "JSON nested too deeply (a plan needs only a few levels)") \
            from None
    except ValueError as error:  # an integer of thousands of digits, NaN/Infinity
        raise _unreadable(source, str(error)) from None


def loads(text, source: str = "<plan>") -> dict:
    """Parses and validates a plan from JSON text (str or UTF-8 bytes)."""
    return validate(parse(text, source), source)


def read_bytes(path) -> bytes:
    """A plan file's bytes; PlanError naming the file when it cannot be read or is larger than
    ops.MAX_FILE_BYTES."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(ops.MAX_FILE_BYTES + 1)
    except OSError as error:
        raise PlanError([f"{source}: cannot read: {error.strerror or error}"]) from None
    if len(data) > ops.MAX_FILE_BYTES:
        raise _unreadable(source, f"larger than {ops.MAX_FILE_BYTES} bytes (the limit of a "
                                  f"plan file)")
    return data


def load(path) -> dict:
    """Reads and validates a plan file. Raises PlanError (naming the file) on any problem."""
    source = os.fspath(path)
    return loads(read_bytes(path), source)


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
        lines.append("    ]}" + ("," if r + 1 < len(plan["ranks"]) else ""))
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
