"""``forestcc plan report``: the forest against ring, tree and hierarchical baselines and the bound.

    from forestcc import topology
    from forestcc.plan.report import make_report, format_report, draw_report
    report = make_report(topology.preset("dgx-a100x2"), "all_reduce")
    print(format_report(report)); draw_report(report, "report.png")

Every algorithm's plan is generated for the topology (forestcc.algorithms: forest_plan, and the
baselines ring_plan, double_binary_tree_plan, hierarchical_plan), prepared once
(simulator.Simulator) and simulated at each size; the bound is the topology's exact throughput
optimum for the collective (forestcc.algorithms.throughput_bound), a bandwidth that no schedule
exceeds at any size. Algorithms that do not apply (the tree is an all_reduce; the hierarchical
plan needs boxes with rails) are shown as n/a.

What it does at which scale (simulation time grows with transfers: about ranks^2 per size for
rings and forests, times the slices): up to LARGE_RANKS ranks, 11 sizes (1 MiB to 1 GiB,
doubling) and, without k, the forest with the trees per root of candidate_ks (1, 2, the
optimal k and, up to WIDE_K_RANKS ranks, every k up to WIDE_K_MAX), whichever simulates fastest
at the largest size, each (and a given k's forest too) with and without the plan compiler's
lanes where they apply; up to WIDE_K_RANKS ranks the one chosen is tried with MORE_SLICES
slices too. Above LARGE_RANKS, fewer sizes (LARGE_SIZES: 1 MiB to
1 GiB, x4) and one forest, the generator's own (optimal) k, unless k is given: a 1,024-rank
ring all_gather makes some 16 million transfers at every size, and each extra forest
candidate costs a full 1 GiB simulation and a plan compile. At any scale, a baseline whose plan
would exceed MAX_BASELINE_OPS ops is n/a (its plan would not fit in memory as Python dicts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ..algorithms.forest_plan import DEFAULT_MAX_SLICES
from .simulator import SimResult, Simulator

__all__ = ["ALGORITHMS", "DEFAULT_SIZES", "LARGE_RANKS", "LARGE_SIZES", "MAX_BASELINE_OPS",
           "MORE_SLICES", "WIDE_K_MAX", "WIDE_K_RANKS", "Report", "candidate_ks", "default_factor", "default_sizes", "draw_report", "format_report", "make_report",
           "ring_op_count"]

ALGORITHMS = ("forest", "ring", "tree", "hierarchical")
# 1 MiB .. 1 GiB, doubling (nccl-tests' -b 1M -e 1G -f 2).
DEFAULT_SIZES = tuple(1 << p for p in range(20, 31))
# Above this many ranks the report does less work by default (see the module docstring).
LARGE_RANKS = 256
# Up to this many ranks the report also tries every k from 3 to WIDE_K_MAX (below the optimal
# k): which k simulates fastest is not monotone (mi250x2 all_reduce at 1 GiB: 87.8% at k = 1,
# 87.4% at 2, 88.2% at 3, 89.4% at 4, 91.1% at 5, 92.6% at 6, 75.0% at its optimal 83), and at
# 64 ranks each extra k costs under a CPU second (a forest, two compiles, two simulations);
# at 256 ranks one forest simulation at 1 GiB takes 2-12 CPU s, so there only 1, 2 and optimal.
WIDE_K_RANKS = 64
WIDE_K_MAX = 8
# Up to WIDE_K_RANKS ranks the chosen forest is also compiled with up to this many slices (the
# compiler's default is DEFAULT_MAX_SLICES, 64) and kept if faster: a reduce_scatter's up phase
# fills and drains slice by slice (mi250x4 reduce_scatter k = 1 at 1 GiB: 80.2 / 86.3 / 89.6 /
# 91.1% at 32 / 64 / 128 / 256 slices; all_gather barely moves). Four times the transfers, so
# one more simulation of the chosen forest only, and not above WIDE_K_RANKS.
MORE_SLICES = 256
# 1 MiB .. 1 GiB, x4 (-b 1M -e 1G -f 4).
LARGE_SIZES = tuple(1 << p for p in range(20, 31, 2))


# The most ops a baseline plan may have for the report to build it: plans are built as Python
# dicts, some 760 bytes per op at 512 ranks (a ring all_gather, 4.2 million ops, peaks at
# 3.2 GB), so 8 million ops is about 6 GB. A 1,024-rank ring all_gather has 16.8 million.
MAX_BASELINE_OPS = 8_000_000


def ring_op_count(topo, collective: str) -> int:
    """Ops of ring_plan(topo, collective) without building it (test_report.py checks the two
    agree): on a ring of m ranks each rank, per step, waits and puts (all_gather) or waits, puts
    and reduces (reduce_scatter), m - 1 steps, and a few ops to enter and finish; all_reduce is
    both passes."""
    from ..algorithms.baselines import ring_orders
    per_step, extra = {"all_gather": (2, 3), "reduce_scatter": (3, 2)}.get(collective, (5, 2))
    return sum(len(ring) * (per_step * (len(ring) - 1) + extra) for ring in ring_orders(topo))


def candidate_ks(nranks: int, optimal_k: int) -> list:
    """The trees per root whose forests the report simulates to choose one when no k is given
    (up to LARGE_RANKS ranks): 1, 2 and the optimal k, and up to WIDE_K_RANKS ranks every k
    below the optimal one up to WIDE_K_MAX."""
    ks = {1, 2, optimal_k}
    if nranks <= WIDE_K_RANKS:
        ks.update(range(3, min(optimal_k, WIDE_K_MAX + 1)))
    return sorted(ks)


def default_factor(nranks: int) -> int:
    """The step between sizes when none is given: 2, or 4 above LARGE_RANKS ranks."""
    return 4 if nranks > LARGE_RANKS else 2


def default_sizes(nranks: int) -> tuple:
    """The sizes a report simulates when none are given: DEFAULT_SIZES, or LARGE_SIZES above
    LARGE_RANKS ranks."""
    return LARGE_SIZES if nranks > LARGE_RANKS else DEFAULT_SIZES


@dataclass
class Report:
    """Simulated results per algorithm (None: n/a, with the reason in ``skipped``)."""
    topology_name: str
    collective: str
    nranks: int
    sizes: list
    bound_algbw: Fraction
    forest_summary: str
    forest_k: int = 0
    results: dict = field(default_factory=dict)   # algorithm -> [SimResult per size] or None
    skipped: dict = field(default_factory=dict)   # algorithm -> why n/a
    notes: list = field(default_factory=list)


def _forest(topo, collective, k, size):
    """The forest plan for the report, prepared, with what it was simulated at already
    ({size: SimResult}): above LARGE_RANKS ranks, the forest with k trees per root (the
    generator's optimal k unless k is given), as compiled by default; else, of the forests with k
    trees per root (when given) or with each of candidate_ks, the one the simulator finds
    fastest at `size`. Fewer trees mean fewer, bigger transfers, which often realize more of the
    link bandwidth than the exact optimum's many small ones, at a loss (printed) on paper. Where
    some tree arc is a direct link, each candidate is compiled with and without lanes
    (tree_plan.py) and the faster kept; up to WIDE_K_RANKS ranks the one kept is tried with
    MORE_SLICES slices too. Also returns the forest, the optimal k when it was a candidate,
    whether the plan has lanes, and MORE_SLICES when it was chosen (else None)."""
    from ..algorithms.forest import generate_forest
    from ..algorithms.forest_plan import compile_forest
    given = generate_forest(topo, collective, k) if k is not None else generate_forest(topo, collective)
    if topo.num_ranks > LARGE_RANKS:
        return Simulator(compile_forest(given), topo, validated=True), {}, given, None, True, None
    forests, optimal_k = [given], None
    if k is None:
        forests = [given if candidate == given.k else generate_forest(topo, collective, candidate)
                   for candidate in candidate_ks(topo.num_ranks, given.k)]
        optimal_k = given.k
    best = None
    for forest in forests:
        for lanes in (False, True) if _direct_links(forest) else (True,):
            plan = Simulator(compile_forest(forest, lanes=lanes), topo, validated=True)
            result = plan.run(size)
            if best is None or result.algbw > best[0].algbw * 1.001:
                best = (result, plan, forest, lanes, None)
    if topo.num_ranks <= WIDE_K_RANKS:
        forest, lanes = best[2], best[3]
        plan = Simulator(compile_forest(forest, lanes=lanes, max_slices=MORE_SLICES), topo,
                         validated=True)
        result = plan.run(size)
        if result.algbw > best[0].algbw * 1.001:
            best = (result, plan, forest, lanes, MORE_SLICES)
    return best[1], {size: best[0]}, best[2], optimal_k, best[3], best[4]


def _direct_links(forest) -> bool:
    """Whether some tree arc is one link (a two-node route): only then can the plan compiler
    spread worker pairs over lanes (tree_plan.py), which helps most forests and costs some
    (mi250x1 all_reduce at its optimal k: 92.7% without, 90.1% with), so both are simulated."""
    return any(len(route) == 2 for tree in forest.trees for route in tree.routes)


def _prepared(topo, collective, k, size, skipped):
    """(algorithm, Simulator of its plan, {size: SimResult} already simulated), one algorithm
    at a time, so that only one large plan is held at once; the forest first, then a line of
    summary. Baselines that do not apply go to `skipped` (algorithm -> why)."""
    from ..algorithms.baselines import double_binary_tree_plan, hierarchical_plan, ring_plan
    plan, done, forest, optimal_k, lanes, slices = _forest(topo, collective, k, size)
    summary = forest.report()
    if optimal_k is not None and forest.k != optimal_k:
        summary += (f"\nchosen     k={forest.k} (simulated faster at {size} B than the optimal "
                    f"k={optimal_k})")
    if not lanes:
        summary += f"\nchosen     without lanes (simulated faster at {size} B)"
    if slices is not None:
        summary += (f"\nchosen     up to {slices} slices (simulated faster at {size} B than "
                    f"{DEFAULT_MAX_SLICES}; --max-slices {slices} in `plan generate forest`)")
    yield "forest", plan, done, (summary, forest.k)
    del plan
    makers = {"ring": ring_plan, "tree": double_binary_tree_plan,
              "hierarchical": hierarchical_plan}
    for name, make in makers.items():
        count = ring_op_count(topo, collective) if name == "ring" else 0
        if count > MAX_BASELINE_OPS:
            skipped[name] = (f"its plan would have {count:,} ops, more "
                             f"than the report builds in memory ({MAX_BASELINE_OPS:,}; about "
                             "760 bytes each as Python dicts)")
            continue
        try:
            plan = make(topo, collective)
        except ValueError as err:
            skipped[name] = str(err)
            continue
        # once for every size; it keeps no ops of the plan, which the generator validated
        prepared = Simulator(plan, topo, validated=True)
        del plan
        yield name, prepared, {}, None
        del prepared


def make_report(topo, collective: str = "all_reduce", sizes=None, k: int | None = None,
                progress=None) -> Report:
    """Generates every algorithm's plan for `topo` and simulates it at each size (bytes, the
    nccl-tests size; None: default_sizes for the rank count). k: the forest's trees per root
    (None: chosen by simulation, or the optimal k above LARGE_RANKS ranks; see _forest).
    progress(algorithm, size) is called before each simulation."""
    from ..algorithms.forest import throughput_bound
    if sizes is None:
        sizes = default_sizes(topo.num_ranks)
    sizes = list(sizes)
    bound, _ = throughput_bound(topo, collective)
    report = Report(topo.name, collective, topo.num_ranks, sizes, bound, "",
                    results={name: None for name in ALGORITHMS})
    for name, plan, done, forest_info in _prepared(topo, collective, k, max(sizes),
                                                   report.skipped):
        if forest_info is not None:
            report.forest_summary, report.forest_k = forest_info
        rows: list[SimResult] = []
        for size in sizes:
            if progress is not None:
                progress(name, size)
            rows.append(done[size] if size in done else plan.run(size))
        del plan
        report.results[name] = rows
        for note in dict.fromkeys(n for row in rows for n in row.notes):
            report.notes.append(f"{name}: {note}")
    return report


def format_report(report: Report) -> str:
    """The report as an nccl-tests-like table of algbw (GB/s) per size, with a summary."""
    bound = float(report.bound_algbw)
    lines = [
        (f"# forestcc plan report: {report.collective} on {report.topology_name} "
         f"({report.nranks} ranks), simulated"),
        ("# algbw in GB/s (size / time, nccl-tests); bound: the topology's throughput optimum "
         f"{bound:.2f} GB/s (= {report.bound_algbw})"),
        *(f"# {line}" for line in report.forest_summary.splitlines()),
        (f"# {'size (B)':>12} " + " ".join(f"{name:>12}" for name in ALGORITHMS)
         + f" {'bound':>10}"),
    ]
    for i, size in enumerate(report.sizes):
        cells = []
        for name in ALGORITHMS:
            rows = report.results.get(name)
            cells.append(f"{rows[i].algbw:12.2f}" if rows else f"{'n/a':>12}")
        actual = next((rows[i].size for rows in report.results.values() if rows), size)
        lines.append(f"  {actual:>12} " + " ".join(cells) + f" {bound:10.2f}")
    forest = report.results.get("forest")
    if forest:
        last = len(report.sizes) - 1
        best = max(((rows[last].algbw, name) for name, rows in report.results.items()
                    if rows and name != "forest"), default=None)
        summary = (f"# at {forest[last].size} B the forest reaches "
                   f"{forest[last].algbw / bound * 100:.1f}% of the bound")
        if best is not None:
            summary += (f" and {forest[last].algbw / best[0]:.2f}x the best baseline "
                        f"({best[1]}, {best[0]:.2f} GB/s)")
        lines.append(summary)
    for name, why in report.skipped.items():
        lines.append(f"# {name}: n/a ({why})")
    for note in report.notes:
        lines.append(f"# note: {note}")
    return "\n".join(lines)


def draw_report(report: Report, path) -> None:
    """algbw against size (log x), one line per algorithm and the bound dashed, to an image."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    markers = {"forest": "o", "ring": "s", "tree": "^", "hierarchical": "D"}
    for name in ALGORITHMS:
        rows = report.results.get(name)
        if rows:
            label = f"forest (k={report.forest_k})" if name == "forest" else name
            ax.plot([r.size for r in rows], [r.algbw for r in rows], marker=markers[name],
                    label=label)
    ax.axhline(float(report.bound_algbw), linestyle="--", color="gray",
               label=f"bound ({float(report.bound_algbw):.1f} GB/s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("algbw (GB/s)")
    ax.set_title(f"{report.collective} on {report.topology_name} ({report.nranks} ranks), "
                 "simulated")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
