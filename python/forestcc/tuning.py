"""The tuning table that ``algo="auto"`` reads: which built-in algorithm serves which
collective at which message size and rank count.

libforestcc loads the table itself (``collectives/tuning_table.cpp``; C++ programs use it with no
Python involved); this module keeps the tooling on top: reading, checking and showing tables, and
``forestcc-perf --tune``, which writes them. Where it comes from, first found wins:
1. the file named by ``FORESTCC_TUNING`` (environment);
2. ``$XDG_CONFIG_HOME/forestcc/tuning.json`` (default ``~/.config/forestcc/tuning.json``), which
   ``forestcc-perf --tune`` writes for this machine;
3. the defaults shipped with forestcc (``forestcc/data/tuning.json``, also compiled into
   libforestcc), measured on a 2-core development machine (see README, "Choosing algorithms").

Format: ``{"version": 1, "source": str, "rules": [{"collective", "min_ranks", "max_ranks",
"min_bytes", "max_bytes" (null: unbounded), "algorithm", optionally "memory", "in_place",
"min_nodes" and "max_nodes"}, ...]}``; the first rule that matches (collective, rank count,
node count, bytes = the larger of input and output, memory, placement) wins; no match means
"direct". ``min_nodes`` (an integer >= 1, default 1) and ``max_nodes`` (an integer >= min_nodes,
or null: unbounded; default 1) give the number of nodes the communicator's ranks are on: a rule
without them is for one node, so rules measured on one machine keep their meaning; ``eager``
never matches on several nodes (its scratch banks are mapped shared memory), whatever a rule
says. Which algorithms serve several nodes and why: schedules/README.md, "Choosing algorithms
across nodes". ``memory`` is ``"shared"`` (the call's
buffers all come from ``forestcc.empty``, so peers map them) or ``"private"`` (anything else:
peers reach it with cross-process calls) or ``"device"`` (GPU memory, docs/gpu.md); a rule
without it matches host memory of either kind, and GPU calls only match ``"device"`` rules
(none ship yet: GPU calls without one run ``direct``). The best algorithm
differs between them: on private memory, copying into the peers' mapped scratch
(``direct_small``) beats cross-process calls up to a few MiB, on shared memory reading the peers
in place (``direct``) wins. ``in_place`` (true or false) restricts a rule to in-place or to
out-of-place calls; without it a rule matches both. They can differ too: an in-place all_to_all
on private memory must stage every block somewhere before it is overwritten, which scratch does
cheaply, while out of place the blocks go straight from input to output.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

__all__ = ["builtin_algorithms", "default_path", "user_path", "load", "rules_for_engine",
           "validate_table"]

# A rule's "memory" and the engine's code for it (absent: -1, any memory).
MEMORY_KINDS = {"private": 0, "shared": 1, "device": 2}
# A rule's "in_place" and the engine's code for it (absent: -1, both).
PLACEMENTS = {False: 0, True: 1}


@functools.lru_cache(maxsize=None)
def builtin_algorithms() -> frozenset:
    """Names of the built-in (C++) generators."""
    from forestcc import _C
    return frozenset(name for name, _ in _C.plan.algorithms())


def default_path() -> Path:
    return Path(__file__).parent / "data" / "tuning.json"


def user_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "forestcc" / "tuning.json"


def active_path() -> Path:
    """The file ``algo="auto"`` uses now."""
    from forestcc import _C
    env = _C.config_string("FORESTCC_TUNING")  # one config table for every knob
    if env:
        return Path(env)
    user = user_path()
    return user if user.exists() else default_path()


def validate_table(table, source: str = "<tuning>") -> dict:
    """Checks a tuning table with libforestcc's own check (``parseTuningTable`` in
    ``collectives/tuning_table.cpp``, what loads tables for ``algo="auto"``), so a table passes
    here exactly when the engine accepts it; raises ValueError naming the source and rule."""
    from forestcc import _C
    try:
        text = json.dumps(table, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: not a forestcc tuning table ({exc})") from exc
    _C.plan.check_tuning_table(text, source)
    return table


def load(path=None) -> dict:
    path = Path(path) if path is not None else active_path()
    try:
        table = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the tuning table ({exc})") from exc
    return validate_table(table, str(path))


def rules_for_engine(table: dict) -> list:
    """Rows for the native engine: (collective, min_ranks, max_ranks, min_bytes, max_bytes
    (-1: unbounded), algorithm, memory (-1 any, 0 private, 1 shared), in place (-1 both, 0 out
    of place, 1 in place)). all_to_all_v shares all_to_all's rules. These rows carry no node
    count, so they are the one-node rules only (rules for several nodes are left out; the engine
    loads the whole table itself)."""
    return [(r["collective"], r["min_ranks"], r["max_ranks"], r["min_bytes"],
             -1 if r["max_bytes"] is None else r["max_bytes"], r["algorithm"],
             MEMORY_KINDS.get(r.get("memory"), -1), PLACEMENTS.get(r.get("in_place"), -1))
            for r in table["rules"]
            if r["collective"] != "all_to_all_v" and r.get("min_nodes", 1) == 1]
