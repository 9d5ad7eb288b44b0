"""Topology files: JSON, schema in ``schedules/topologies/topology.schema.json``.

Numbers are read exactly: ``12.5`` becomes ``Fraction(25, 2)``, and a string ``"100/3"`` is
accepted where a decimal cannot say it. Errors name the file and the field, e.g.
``dgx.json: links[12].bandwidth: expected a positive number, got -1``.
"""
from __future__ import annotations

import json
import os
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .model import COMPUTE, Link, Node, Topology, TopologyError

__all__ = ["FORMAT", "VERSION", "dumps", "from_dict", "load", "loads", "save", "to_dict"]

FORMAT = "forestcc-topology"
VERSION = 1
_NODE_FIELDS = {"id", "kind", "rank", "box", "rail"}
_LINK_FIELDS = {"src", "dst", "bandwidth", "latency", "bidirectional"}


def _number(value: Any, field: str) -> Fraction:
    if isinstance(value, bool):
        raise TopologyError(f"{field}: expected a number, got {value!r}")
    if isinstance(value, (int, Decimal)):
        return Fraction(value)
    if isinstance(value, float):  # only when a caller passes an already-parsed dict
        return Fraction(Decimal(repr(value)))
    if isinstance(value, str):
        try:
            return Fraction(value)
        except (ValueError, ZeroDivisionError):
            pass
    raise TopologyError(f"{field}: expected a number or a 'p/q' string, got {value!r}")


def _optional_int(entry: dict, key: str, field: str):
    value = entry.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TopologyError(f"{field}.{key}: expected an integer or null, got {value!r}")
    return value


def from_dict(data: Any, where: str = "<topology>") -> Topology:
    """Builds a Topology from parsed JSON; ``where`` (a file name) prefixes every error."""
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a JSON object at the top level")
    if data.get("format") != FORMAT:
        raise TopologyError(f"{where}: format: expected {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != VERSION:
        raise TopologyError(f"{where}: version: this forestcc reads version {VERSION}, "
                            f"got {data.get('version')!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{where}: name: expected a non-empty string")
    for key in ("nodes", "links"):
        if not isinstance(data.get(key), list):
            raise TopologyError(f"{where}: {key}: expected a list")
    nodes: list[Node] = []
    for i, entry in enumerate(data["nodes"]):
        field = f"{where}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise TopologyError(f"{field}: expected an object")
        unknown = set(entry) - _NODE_FIELDS
        if unknown:
            raise TopologyError(f"{field}: unknown field(s) {sorted(unknown)}")
        if "id" not in entry or "kind" not in entry:
            raise TopologyError(f"{field}: 'id' and 'kind' are required")
        nodes.append(Node(entry["id"], entry["kind"], _optional_int(entry, "rank", field),
                          _optional_int(entry, "box", field), _optional_int(entry, "rail", field)))
    Topology(name, nodes, [], where=where)  # node errors first: links refer to nodes
    links: list[Link] = []
    for i, entry in enumerate(data["links"]):
        field = f"{where}: links[{i}]"
        if not isinstance(entry, dict):
            raise TopologyError(f"{field}: expected an object")
        unknown = set(entry) - _LINK_FIELDS
        if unknown:
            raise TopologyError(f"{field}: unknown field(s) {sorted(unknown)}")
        for key in ("src", "dst", "bandwidth"):
            if key not in entry:
                raise TopologyError(f"{field}.{key}: required")
        bandwidth = _number(entry["bandwidth"], f"{field}.bandwidth")
        latency = _number(entry.get("latency", 0), f"{field}.latency")
        both = entry.get("bidirectional", False)
        if not isinstance(both, bool):
            raise TopologyError(f"{field}.bidirectional: expected true or false, got {both!r}")
        # Report link errors at this link's position, before expansion renumbers them.
        for end in ("src", "dst"):
            if not isinstance(entry[end], str):
                raise TopologyError(f"{field}.{end}: expected a node id string")
        if bandwidth <= 0:
            raise TopologyError(f"{field}.bandwidth: expected a positive number, got {entry['bandwidth']!r}")
        if latency < 0:
            raise TopologyError(f"{field}.latency: expected a non-negative number, got {entry['latency']!r}")
        links.append(Link(entry["src"], entry["dst"], bandwidth, latency))
        if both:
            links.append(Link(entry["dst"], entry["src"], bandwidth, latency))
    known = {n.id for n in nodes}
    for i, entry in enumerate(data["links"]):
        for end in ("src", "dst"):
            if entry[end] not in known:
                raise TopologyError(f"{where}: links[{i}].{end}: unknown node {entry[end]!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise TopologyError(f"{where}: description: expected a string")
    return Topology(name, nodes, links, description, where=where)


def _json_number(value: Fraction) -> int | float | str:
    if value.denominator == 1:
        return value.numerator
    as_float = float(value)
    if Fraction(Decimal(repr(as_float))) == value:
        return as_float
    return f"{value.numerator}/{value.denominator}"


def to_dict(topology: Topology) -> dict[str, Any]:
    """JSON-ready dict; a link and its exact reverse are written once as ``bidirectional``."""
    nodes = []
    for n in topology.nodes:
        entry: dict[str, Any] = {"id": n.id, "kind": n.kind}
        if n.kind == COMPUTE:
            entry["rank"] = n.rank
        if n.box is not None:
            entry["box"] = n.box
        if n.rail is not None:
            entry["rail"] = n.rail
        nodes.append(entry)
    unpaired: dict[tuple, list[int]] = {}
    for i, l in enumerate(topology.links):
        unpaired.setdefault((l.src, l.dst, l.bandwidth, l.latency), []).append(i)
    used = [False] * len(topology.links)
    links = []
    for i, l in enumerate(topology.links):
        if used[i]:
            continue
        used[i] = True
        entry = {"src": l.src, "dst": l.dst, "bandwidth": _json_number(l.bandwidth),
                 "latency": _json_number(l.latency)}
        partners = unpaired.get((l.dst, l.src, l.bandwidth, l.latency), [])
        while partners and used[partners[0]]:
            partners.pop(0)
        if partners:
            used[partners.pop(0)] = True
            entry["bidirectional"] = True
        links.append(entry)
    return {"format": FORMAT, "version": VERSION, "name": topology.name,
            "description": topology.description, "nodes": nodes, "links": links}


def dumps(topology: Topology) -> str:
    """One node or link per line: diffs stay readable and files stay small."""
    data = to_dict(topology)
    head = {k: v for k, v in data.items() if k not in ("nodes", "links")}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value)},")
    for key in ("nodes", "links"):
        items = ",\n".join("    " + json.dumps(item) for item in data[key])
        lines.append(f'  "{key}": [\n{items}\n  ]' + ("," if key == "nodes" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def loads(text: str, where: str = "<string>") -> Topology:
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as err:
        raise TopologyError(f"{where}: not valid JSON: {err}") from None
    return from_dict(data, where)


def load(path: str | os.PathLike) -> Topology:
    """Reads a topology file; errors name the file and the field."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror}") from None
    return loads(text, where=path)


def save(topology: Topology, path: str | os.PathLike) -> None:
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        f.write(dumps(topology))
