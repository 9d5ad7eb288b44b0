"""ForestColl forests compiled to plans (format v1).

    from forestcc import topology
    from forestcc.algorithms.forest_plan import forest_plan
    plan, forest = forest_plan(topology.preset("dgx-a100x2"), "all_reduce")

Rank i is the topology's i-th compute node. Every root owns k chunks of its block
(chunks_per_block = k, the trees per root counted with multiplicity); a tree of multiplicity m
carries m of them, so each tree moves exactly its share of the data and the plan's link loads are
the forest's. all_gather broadcasts every root's chunks down its trees, reduce_scatter reduces them
up the trees of the reversed topology, all_reduce reduces up and broadcasts down the same trees
(its vector is N*k chunks: root r's trees carry chunks r*k .. r*k+k-1). How trees become ops,
workers and channels is tree_plan.py's business.

Large messages pipeline: the executor runs the op lists once per slice (``pipeline``), and slice
s+1 of a tree enters at the root while slice s moves further down, so the deep trees cost only a
few slices of fill. mode "pipelined" (default) spreads a rank's work over workers per tree level;
"compact" uses two per rank (see tree_plan.py). The optimal k is exact on paper, but many trees
make many small transfers: a smaller k (1 or 2) often realizes more of the links in simulation
at a small, printed loss (``forestcc plan report`` picks the faster). The routes of the trees (paths through switches) are recorded in the
provenance for the simulator: ``params.routes`` lists node paths, ``params.channel_routes[r][c]``
is the index of the path that data sent by rank r on channel c takes (-1: none recorded).
"""
from __future__ import annotations

from fractions import Fraction

from ..plan import ops as plan_ops
from ..plan.bulk import paused_gc
from ..topology.model import Topology
from .forest import Forest, generate_forest
from .tree_plan import TreeSpec, compile_trees, single_link

__all__ = ["DEFAULT_MAX_SLICES", "DEFAULT_MIN_SLICE_BYTES", "PREDICTION_BYTES", "compile_forest",
           "forest_plan", "forest_tree_specs", "record_routes"]

GENERATOR = "forestcc.forest"
# Pipelining: up to this many slices, each at least this big (per chunk). Deep trees need many
# slices to fill; much smaller slices spend more on signalling than they gain.
DEFAULT_MAX_SLICES = 64
DEFAULT_MIN_SLICE_BYTES = 32 * 1024
# predicted_time_us is given for this size (nccl-tests' size: the whole buffer).
PREDICTION_BYTES = 1 << 30


def _order_trees(trees):
    """A root's trees in an order where neighbours share many (arc, route) pairs, so that more of
    their arcs travel as one segment: greedily, the next tree is the one most like the last."""
    remaining = sorted(trees, key=lambda t: (-t.multiplicity, t.arcs))
    order = [remaining.pop(0)]
    while remaining:
        last = set(zip(order[-1].arcs, order[-1].routes))
        best = max(range(len(remaining)),
                   key=lambda i: (len(last & set(zip(remaining[i].arcs, remaining[i].routes))),
                                  -i))
        order.append(remaining.pop(best))
    return order


def forest_tree_specs(forest: Forest) -> list[TreeSpec]:
    """The forest's trees as TreeSpecs: by root, each carrying `multiplicity` chunks of the root's
    k (all_reduce: of the vector's N*k); routes turned to point from parent to child."""
    by_root: dict = {}
    for tree in forest.trees:
        by_root.setdefault(tree.root, []).append(tree)
    specs = []
    for root in sorted(by_root):
        first = root * forest.k if forest.collective == plan_ops.ALL_REDUCE else 0
        for tree in _order_trees(by_root[root]):
            routes = tree.routes
            if forest.collective == plan_ops.REDUCE_SCATTER:  # recorded child -> parent
                routes = tuple(tuple(reversed(r)) for r in routes)
            specs.append(TreeSpec(root, tree.arcs, first, tree.multiplicity, routes))
            first += tree.multiplicity
    return specs


def record_routes(routes: dict, plan: dict) -> dict:
    """Provenance params for per-channel routes ({(rank, ch): node path}) of a built plan:
    {"routes": [path, ...], "channel_routes": [[index or -1 per channel] per rank]}."""
    paths: list = []
    index: dict = {}
    table = [[-1] * len(entry["channels"]) for entry in plan["ranks"]]
    for (rank, ch), path in sorted(routes.items()):
        if path not in index:
            index[path] = len(paths)
            paths.append(list(path))
        table[rank][ch] = index[path]
    return {"routes": paths, "channel_routes": table}


def _text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def compile_forest(forest: Forest, *, mode: str = "pipelined", in_place: bool = False,
                   max_slices: int | None = None, min_slice_bytes: int | None = None,
                   name: str | None = None, engine: str = "native", lanes: bool = True) -> dict:
    """The forest as a validated plan for its collective (see the module docstring).

    mode: "pipelined" (workers per rank and parent: slices pipeline through the trees) or
    "compact" (one worker per rank, one slice unless max_slices says otherwise). engine:
    tree_plan.compile_trees' ("native": C++, or "python": the reference; the same plan).
    lanes: tree_plan.compile_trees' (heavy worker pairs over the spare channels of a direct
    link; False: one channel each, the plans before lanes)."""
    topo = forest.topology
    n = topo.num_ranks
    collective = forest.collective
    k = forest.k * (n if collective == plan_ops.ALL_REDUCE else 1)
    label = name or f"forest_{collective}_{topo.name}_k{forest.k}" + (
        "_compact" if mode == "compact" else "")
    with paused_gc():  # millions of op dicts at 1,024 ranks (plan/bulk.py)
        builder, routes = compile_trees(collective, n, forest_tree_specs(forest), k, mode=mode,
                                        in_place=in_place, name=label, engine=engine,
                                        lanes=lanes)
    if max_slices is None:
        max_slices = DEFAULT_MAX_SLICES if mode != "compact" else 1
    if min_slice_bytes is None:
        min_slice_bytes = DEFAULT_MIN_SLICE_BYTES
    algbw = forest.achieved_algbw  # GB/s = bytes per ns; time in us = bytes / (algbw * 1e3)
    params = {
        "collective": collective,
        "k": forest.k,
        "natural_k": forest.natural_k,
        "method": forest.method,
        "mode": mode,
        # whether lanes could apply: a compact plan or one with no single-link route has none
        "lanes": lanes and mode != "compact" and any(map(single_link, routes.values())),
        "trees": len(forest.trees),
        "bound_algbw": _text(forest.bound_algbw),
        "achieved_algbw": _text(algbw),
        "optimal": forest.optimal,
        "loss": _text(forest.loss),
        "predicted_size_bytes": PREDICTION_BYTES,
    }
    with paused_gc():
        plan = builder.build(generator=GENERATOR, params=params, max_slices=max_slices,
                             min_slice_bytes=min_slice_bytes,
                             topology_fingerprint=topo.fingerprint(),
                             predicted_time_us=float(PREDICTION_BYTES / (algbw * 1000)),
                             share_ops=True)
        plan["provenance"]["params"].update(record_routes(routes, plan))
    return plan


def forest_plan(topo: Topology, collective: str = "all_gather", k: int | None = None, *,
                method: str = "auto", **options) -> tuple[dict, Forest]:
    """Generates the forest (generate_forest) and compiles it; returns (plan, forest). Options go
    to compile_forest."""
    forest = generate_forest(topo, collective, k, method)
    return compile_forest(forest, **options), forest
