"""--tune: measure every built-in forestcc algorithm at every size and write the tuning table
that ``algo="auto"`` reads (format: forestcc.tuning; version 1, first matching rule wins).

For each collective (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce,
gather, scatter, barrier) and each algorithm that generates it (``forestcc._C.plan.algorithms()``;
on one node not those that follow the node layout, hierarchical and 2dh, which there are only
another shape of a one-node algorithm; on several nodes not eager, whose scratch banks are
reached through shared memory only),
each size of -b/-e/-f is measured the way a table row is (forestcc_perf.runner: -w warm-ups,
-n × -m timed operations, -a across ranks, -c checked operations), with the algorithms
interleaved, and the whole sweep of sizes is repeated --tune-repeats times (checked the first
time only); an algorithm's cost at a size is its time per
operation, the lowest of the repeats, so that a burst of load from other processes does not
decide, and out-of-place and in-place calls are costed and chosen apart. The cheapest
wins, except that the algorithm chosen at the previous size is kept while
it is within TOLERANCE of the cheapest: noise on a loaded machine then does not flip the choice
back and forth between neighbouring sizes; and a winner at a single size, between two sizes that
chose the same other algorithm, must beat that algorithm by more than BLIP there. Consecutive sizes with the same choice become one
rule whose byte range reaches halfway (geometrically) to the neighbouring measured sizes; the
first rule starts at 0 bytes and the last is unbounded. Where in-place and out-of-place calls
come to the same rules, the rules carry no "in_place" and serve both; where they differ, each
placement gets its own rules (``"in_place": true`` / ``false``). An algorithm that gives a wrong
result (#wrong > 0), in either placement, is never chosen, and the run exits 1.

Rules carry min_ranks = max_ranks = the rank count measured (--tune-ranks MIN:MAX widens
them), min_nodes = max_nodes = the node count when the ranks span several nodes (none: one node) and the memory kind measured: ``"memory": "private"`` with --memory numpy (the default),
``"shared"`` with --memory forestcc (forestcc.empty buffers, which peers map); barrier rules
carry none (a barrier has no buffers). Writing merges:
rules already in the output file for other collectives, for rank ranges that are not inside
this one, or for the other memory kind are kept, so ``-n 2`` and ``-n 4`` runs with both
memories into one file give one table for all of them.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from forestcc_perf import __version__
from forestcc_perf.backends.forestcc_backend import (ForestccBackend, algorithm_max_bytes,
                                                     builtin_algorithms)
from forestcc_perf.collectives import COLLECTIVES, DataType, find_collective
from forestcc_perf.runner import (AVERAGE_MODES, Progress, Runner, Settings, combine_times,
                                  move_to_cpu, spread_cpu)
from forestcc_perf.sizes import format_size

TUNED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
         "gather", "scatter", "barrier")
# forestcc runs every broadcast in place (out is x; the perf row's out-of-place form is the same
# call), so its two measurements are of one placement and become one set of rules.
ONE_PLACEMENT = ("broadcast",)
TOLERANCE = 0.05   # keep the previous size's choice while it is within 5% of the cheapest
BLIP = 0.25        # a one-size winner between two equal neighbours must win by more than 25%


def find_tuned(name: str | None) -> list[str] | None:
    """The collectives ``forestcc-perf [NAME] --tune`` tunes: all of them for None or "all"."""
    if name is None or name.strip().lower() == "all":
        return list(TUNED)
    key = name.strip().lower()
    if key == "barrier":
        return ["barrier"]
    coll = find_collective(key)
    return [coll.name] if coll is not None and coll.name in TUNED else None


# -- measuring ------------------------------------------------------------------------------------
class Sweep:
    """Times of every (collective, algorithm, size) on one communicator."""

    def __init__(self, backend: ForestccBackend, settings: Settings, dtype: DataType, op: str,
                 root: int, repeats: int = 1):
        self.b, self.s, self.dtype, self.op, self.root = backend, settings, dtype, op, root
        self.repeats = repeats
        self.wrong: list[str] = []   # what gave a wrong result
        self.failed: dict[str, set[str]] = {}   # collective -> algorithms that did

    def collective(self, name: str, algos: list[str], sizes: list[int],
                   progress: Progress) -> dict[bool, dict[int, dict[str, float]]]:
        """in place (False, and True where forestcc has an in-place form) -> size (bytes of the
        larger buffer, as the engine matches rules) -> algorithm -> us."""
        coll = COLLECTIVES[name]
        runners = {a: Runner(self.b.with_algo(a), coll, self.s, a, a) for a in algos}
        unchecked = Settings(**{**vars(self.s), "check_iters": 0})
        again = {a: Runner(self.b.with_algo(a), coll, unchecked, a, a) for a in algos}
        bad = self.failed.setdefault(name, set())
        # eager plans serve small messages only (their scratch bank)
        limits = {a: algorithm_max_bytes(a, name, self.b.size) for a in algos}

        def serves(a: str, size: int) -> bool:
            limit = limits[a]
            return limit is None or runners[a].message_bytes(size, self.dtype) <= limit

        # one untimed call per algorithm first: plan generation and connections stay out of
        # the first size's times
        if sizes:
            for a in algos:
                if serves(a, sizes[0]):
                    runners[a].measure(sizes[0], self.dtype, self.op, self.root)
        out: dict[bool, dict[int, dict[str, float]]] = {}
        # The whole sweep is repeated (not each size in place): a burst of load from elsewhere
        # then spoils one size of one repeat, not every repeat of a size.
        for repeat in range(self.repeats):
            for size in sizes:
                progress.step(f"{name} {format_size(size)}"
                              + (f" ({repeat + 1}/{self.repeats})" if self.repeats > 1 else ""))
                if coll.count_for_size(size, self.dtype.itemsize, self.b.size) == 0:
                    continue   # nothing to move at this size on this many ranks
                for a in algos:
                    if a in bad or not serves(a, size):
                        continue
                    row = (again if repeat else runners)[a].measure(size, self.dtype, self.op,
                                                                    self.root)
                    cells = row.measurements()
                    wrong = sum(m.wrong or 0 for m in cells)
                    if wrong:
                        bad.add(a)
                        self.wrong.append(f"{name} algorithm {a} at {row.size} B: "
                                          f"#wrong {wrong}")
                        continue
                    for in_place, m in ((False, row.out_of_place), (True, row.in_place)):
                        if m is not None:
                            times = out.setdefault(in_place, {}).setdefault(row.size, {})
                            times[a] = min(m.time_us, times.get(a, m.time_us))
        for by_size in out.values():   # wrong at one size: chosen at none
            for times in by_size.values():
                for a in bad:
                    times.pop(a, None)
        return out

    def barrier(self, algos: list[str]) -> dict[bool, dict[int, dict[str, float]]]:
        s, comm = self.s, self.b.comm
        times: dict[str, float] = {}
        for _ in range(self.repeats):
            for a in algos:
                if s.cpu is not None:
                    move_to_cpu(s.cpu)
                for _ in range(s.warmup_iters + 1):
                    comm.barrier(algo=a)
                self.b.barrier()
                start = time.perf_counter()
                for _ in range(s.iters * s.agg_iters):
                    comm.barrier(algo=a)
                local = (time.perf_counter() - start) * 1e6 / (s.iters * s.agg_iters)
                cost = combine_times(self.b, s.average, local)
                times[a] = min(cost, times.get(a, cost))
        return {False: {0: times}}   # no buffers: one "placement"


# -- choosing -------------------------------------------------------------------------------------
def choose(times: dict[int, dict[str, float]], tolerance: float = TOLERANCE,
           blip: float = BLIP) -> list[tuple[int, str]]:
    """(size, algorithm) per measured size, smallest first (see the module docstring)."""
    chosen: list[tuple[int, str]] = []
    previous = None
    for size in sorted(times):
        row = times[size]
        if not row:
            continue
        best = min(row, key=row.get)
        if previous in row and row[previous] <= row[best] * (1 + tolerance):
            best = previous
        chosen.append((size, best))
        previous = best
    for i in range(1, len(chosen) - 1):   # a lone winner between two equal neighbours
        (_, before), (size, mine), (_, after) = chosen[i - 1:i + 2]
        row = times[size]
        if before == after != mine and before in row and row[before] <= row[mine] * (1 + blip):
            chosen[i] = (size, before)
    return chosen


def _boundary(a: int, b: int) -> int:
    """First byte count of the range that belongs to size b rather than size a (a < b)."""
    return max(a + 1, min(b, math.isqrt(a * b) + 1 if a else 1))


# --memory of the sweep -> the rules' "memory" (forestcc.tuning).
MEMORY_OF = {"numpy": "private", "forestcc": "shared"}


def rules_for(collective: str, chosen: list[tuple[int, str]],
              ranks: tuple[int, int], memory: str | None = None,
              in_place: bool | None = None) -> list[dict]:
    """Consecutive sizes with one choice merged into byte ranges covering 0..unbounded; with
    ``memory`` ("private" or "shared") the rules apply to that memory kind only, with
    ``in_place`` (True or False) to those calls only."""
    rules: list[dict] = []
    for i, (size, algo) in enumerate(chosen):
        lo = 0 if i == 0 else _boundary(chosen[i - 1][0], size)
        hi = None if i == len(chosen) - 1 else _boundary(size, chosen[i + 1][0]) - 1
        if rules and rules[-1]["algorithm"] == algo:
            rules[-1]["max_bytes"] = hi
            continue
        rule = {"collective": collective, "min_ranks": ranks[0], "max_ranks": ranks[1],
                "min_bytes": lo, "max_bytes": hi, "algorithm": algo}
        if memory is not None:
            rule["memory"] = memory
        if in_place is not None:
            rule["in_place"] = in_place
        rules.append(rule)
    return rules


def placement_rules(collective: str, times: dict[bool, dict[int, dict[str, float]]],
                    ranks: tuple[int, int], memory: str | None = None) -> list[dict]:
    """The rules for one collective's sweep: one set serving both placements where their
    choices come to the same rules, else a set for each (out of place first)."""
    sets = {ip: rules_for(collective, choose(by_size), ranks, memory)
            for ip, by_size in times.items()}
    if len(sets) <= 1 or sets[False] == sets[True]:
        return next(iter(sets.values()), [])   # nothing measured (every algorithm wrong): none
    return [{**r, "in_place": ip} for ip in (False, True) for r in sets[ip]]


def one_placement(times: dict[bool, dict[int, dict[str, float]]]
                  ) -> dict[bool, dict[int, dict[str, float]]]:
    """Both placements' measurements as one (the best of either per algorithm and size)."""
    merged: dict[int, dict[str, float]] = {}
    for by_size in times.values():
        for size, row in by_size.items():
            into = merged.setdefault(size, {})
            for a, t in row.items():
                into[a] = min(t, into.get(a, t))
    return {False: merged} if merged else {}


def _nodes(rule: dict) -> tuple:
    """The node range a rule is for (forestcc.tuning: no min_nodes/max_nodes means one node)."""
    return rule.get("min_nodes", 1), rule.get("max_nodes", 1)


def merge(old: dict | None, new_rules: list[dict], source: str) -> dict:
    """The table to write: the new rules, plus the old ones they do not replace (another
    collective, a rank range not inside the new one, another node range (a sweep runs on one
    node, so rules for several nodes are kept), or the other memory kind; a rule for any
    memory is replaced by rules for one kind, and rules for any memory, such as the barrier's,
    replace those of both kinds; placement does not count: a sweep writes rules for both
    placements, or for each, so it replaces the old ones of either). Rules of one collective
    stay in an order where the first match is the intended one: by rank range where the ranges
    are disjoint or equal, else the new rules first."""
    spans = {r["collective"]: (r["min_ranks"], r["max_ranks"], r.get("memory"), _nodes(r))
             for r in new_rules}

    def replaced_by_new(rule: dict) -> bool:
        span = spans.get(rule["collective"])
        return (span is not None and span[0] <= rule["min_ranks"] and rule["max_ranks"] <= span[1]
                and (span[2] is None or rule.get("memory") in (None, span[2]))
                and _nodes(rule) == span[3])

    kept = [r for r in (old or {}).get("rules", []) if not replaced_by_new(r)]
    rules = new_rules + kept
    order = {c: i for i, c in enumerate(TUNED)}
    by_coll: dict[str, list[dict]] = {}
    for r in rules:
        by_coll.setdefault(r["collective"], []).append(r)
    out: list[dict] = []
    for coll in sorted(by_coll, key=lambda c: order.get(c, len(order))):
        group = by_coll[coll]
        ranges = {(r["min_ranks"], r["max_ranks"]) for r in group}
        nested = any(a != b and a[0] <= b[1] and b[0] <= a[1] for a in ranges for b in ranges)
        if not nested:   # a stable sort by rank range keeps byte order within each range
            group = sorted(group, key=lambda r: (r["min_ranks"], r["max_ranks"]))
        out.extend(group)
    sources = [] if old is None else [p for p in str(old.get("source", "")).split("; ")
                                      if p.startswith("forestcc-perf --tune")]
    tag = source.split(":", 1)[0]   # "forestcc-perf --tune (N ranks)" replaces its own entry
    sources = [p for p in sources if p.split(":", 1)[0] != tag] + [source]
    return {"version": 1, "source": "; ".join(sources), "rules": out}


def format_table(table: dict) -> str:
    """JSON with one rule per line (readable and diffable)."""
    lines = ["{", f'  "version": {table["version"]},',
             f'  "source": {json.dumps(table["source"])},', '  "rules": [']
    rules = [json.dumps(r) for r in table["rules"]]
    lines += [f"    {r}," for r in rules[:-1]] + ([f"    {rules[-1]}"] if rules else [])
    return "\n".join(lines + ["  ]", "}"]) + "\n"


def tuned_algorithms(nodes: int) -> dict[str, list[str]]:
    """The built-in algorithms a sweep over ranks on `nodes` nodes measures: on one node every
    one but those that follow the node layout (hierarchical, 2dh: there they are only another
    shape of a one-node algorithm); on several nodes every one but eager, which algo="auto"
    never runs there (its scratch banks are reached through shared memory only)."""
    from forestcc.plan import builtin
    return {a: colls for a, colls in builtin_algorithms().items()
            if (a != "eager" if nodes > 1 else not builtin.uses_nodes(a))}


def for_nodes(rules: list[dict], nodes: int) -> list[dict]:
    """Rules measured on `nodes` nodes: for that node count alone (one node: as they are, since
    rules without min_nodes/max_nodes are one-node rules)."""
    return rules if nodes == 1 else [{**r, "min_nodes": nodes, "max_nodes": nodes} for r in rules]


# -- the command ----------------------------------------------------------------------------------
def main(backend: ForestccBackend, plan: dict, args: Any, root: int) -> int:
    """Run the sweep on every rank; rank 0 prints and writes the table. Returns the exit code."""
    rank, n = backend.rank, backend.size
    settings = Settings(iters=args.iters, warmup_iters=args.warmup_iters,
                        agg_iters=args.agg_iters, average=args.average,
                        check_iters=args.check, blocking=bool(args.blocking),
                        timeout_s=args.timeout)
    # every measurement starts with the ranks on CPUs of their own (runner.spread_cpu): the
    # bootstrap exchanges between them (times, #wrong) can leave two ranks sharing one
    settings.cpu = spread_cpu(backend.all_gather_object(socket.gethostname()), rank)
    dtype, op = plan["dtypes"][0], plan["ops"][0]
    ranks = plan["tune_ranks"] or (n, n)
    nodes = backend.comm.node_count
    algorithms = tuned_algorithms(nodes)
    sweep = Sweep(backend, settings, dtype, op, root, args.tune_repeats)
    say = (lambda text: print(text, flush=True)) if rank == 0 else (lambda text: None)
    say(f"# forestcc-perf {__version__} --tune: {backend.version()}; {n} ranks"
        f"{f' on {nodes} nodes' if nodes > 1 else ''}; "
        f"{dtype.name} {op} root {root}; -b {args.minbytes} -e {args.maxbytes} "
        f"-f {args.stepfactor} -n {args.iters} -w {args.warmup_iters} -m {args.agg_iters} "
        f"-a {AVERAGE_MODES[args.average]} -c {args.check} --tune-repeats {args.tune_repeats}")
    say("# cost: time per operation in us, out of place and in place apart (broadcast: one, "
        "forestcc's is always in place), best of the repeats; * marks the choice")
    new_rules: list[dict] = []
    current = ""
    try:
        progress = Progress(len(plan["tuned"]) * len(plan["sizes"]) * args.tune_repeats,
                            enabled=rank == 0)
        for name in plan["tuned"]:
            current = name
            algos = [a for a, colls in algorithms.items() if name in colls]
            if not algos:
                say(f"# {name}: no built-in algorithm")
                continue
            if name == "barrier":
                times = sweep.barrier(algos)
            else:
                times = sweep.collective(name, algos, plan["sizes"], progress)
                if name in ONE_PLACEMENT:
                    times = one_placement(times)
            progress.clear()
            for in_place, by_size in times.items():
                title = name if name in ("barrier",) + ONE_PLACEMENT else \
                    f"{name} ({'in place' if in_place else 'out of place'})"
                for line in _matrix(title, algos, by_size, dict(choose(by_size)),
                                    sweep.failed.get(name, set())):
                    say(line)
            # a barrier has no buffers: its rules hold for both memory kinds
            memory = None if name == "barrier" else MEMORY_OF.get(backend.memory)
            new_rules += for_nodes(placement_rules(name, times, ranks, memory), nodes)
    except KeyboardInterrupt:
        backend.abort(130)
    except Exception as e:   # one rank's failure ends the job, with the reason
        print(f"forestcc-perf: rank {rank}: --tune {current}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        backend.abort(1)
    for what in sweep.wrong:
        say(f"# WRONG RESULTS (never chosen): {what}")
    if rank == 0:
        try:
            path = _write(new_rules, args.tune_output, ranks, nodes)
        except (OSError, ValueError) as e:
            print(f"forestcc-perf: --tune: cannot write the table: {e}", file=sys.stderr,
                  flush=True)
            return 1
        say(f"# tuning table written to {path} (algo='auto' reads it; FORESTCC_TUNING "
            f"overrides the path):")
        say(path.read_text().rstrip("\n"))
    return 1 if sweep.wrong else 0


def _matrix(name: str, algos: list[str], times: dict[int, dict[str, float]],
            chosen: dict[int, str], wrong: set[str] = frozenset()) -> list[str]:
    """The cost table; "wrong" where an algorithm gave a wrong result, "-" at sizes it does
    not serve (eager plans above their scratch bank)."""
    width = max(12, *(len(a) + 2 for a in algos))
    lines = [f"# {name}", "# " + f"{'bytes':>12}" + "".join(f"{a:>{width}}" for a in algos)]
    for size in sorted(times):
        cells = []
        for a in algos:
            t = times[size].get(a)
            if t is None:
                text = "wrong" if a in wrong else "-"
            else:
                text = f"{t:.2f}" + ("*" if chosen.get(size) == a else " ")
            cells.append(f"{text:>{width}}")
        lines.append("# " + f"{size:>12}" + "".join(cells))
    return lines


def _write(new_rules: list[dict], output: str | None, ranks: tuple[int, int],
           nodes: int = 1) -> Path:
    from forestcc import tuning
    path = Path(output) if output else tuning.user_path()
    old = None
    if path.exists():
        try:
            old = tuning.validate_table(json.loads(path.read_text()), str(path))
        except (ValueError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} exists but is not a tuning table ({e}); remove it or "
                             f"choose another --tune-output") from None
    span = f"{ranks[0]} ranks" if ranks[0] == ranks[1] else f"{ranks[0]}-{ranks[1]} ranks"
    if nodes > 1:
        span += f", {nodes} nodes"
    kinds = {r.get("memory") for r in new_rules} - {None}
    if kinds:
        span += ", " + "/".join(sorted(kinds)) + " memory"
    when = datetime.datetime.now().strftime("%Y-%m-%d")
    source = (f"forestcc-perf --tune ({span}): {socket.gethostname()}, {os.cpu_count()} CPUs, "
              f"{when}")
    table = merge(old, new_rules, source)
    tuning.validate_table(table, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(format_table(table))
    os.replace(tmp, path)
    return path
