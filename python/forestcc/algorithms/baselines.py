"""Baselines mapped onto a topology, for the simulator and the report: rings, double binary trees and
the hierarchical (box, then rail, then box) schedule, as plans (format v1).

Every rank order here follows the topology, using only pairs of ranks joined through switches or
a direct link ("neighbours"):

* Boxes with rails (two or more boxes whose ranks have rails 0..m-1): ``ring_orders`` gives m rings,
  NCCL-style: ring j walks box 0 from rail j upwards, crosses to the next box on the rail it left
  from and walks that box the other way, and so on, so each ring crosses between boxes on rails
  and every NIC carries one ring each way. Inside a box the walk is a Hamiltonian path between the
  entry and exit rails (any order on a switch, a search on a direct-link mesh such as MI250's).
* Otherwise: a Hamiltonian cycle of the neighbour graph (widest links first), and a second one
  sharing no pair with it when there is one; each runs both ways, so a torus uses all four links.

Plans: a ring plan splits the data over the rings, one worker per ring and rank, in one slice
(each ring step already keeps every link of the ring busy, so slicing would only add latency).
The double binary tree (all_reduce only, as in NCCL) reduces and broadcasts half the data over
each of two binary trees whose inner ranks are the other's leaves, over boxes (one pair of trees
per rail, ranks of a box in a chain under the rail's rank) or over ranks; it compiles through
tree_plan.py and pipelines in slices. The hierarchical plan needs two or more equal boxes with
rails: all_reduce = reduce_scatter inside each box (ring), all_reduce across boxes among the ranks
of one rail (ring), all_gather inside each box (ring); all_gather = across boxes then inside;
reduce_scatter = inside boxes then across.
"""
from __future__ import annotations

from collections import deque
from fractions import Fraction

from ..plan import PlanBuilder
from ..plan import ops as plan_ops
from ..topology.model import Topology
from .tree_plan import TreeSpec, compile_trees

__all__ = ["BASELINES", "box_layout", "double_binary_tree_plan", "hierarchical_plan",
           "neighbours", "ring_orders", "ring_plan"]

IN, OUT, SCR = plan_ops.INPUT, plan_ops.OUTPUT, plan_ops.SCRATCH
GENERATOR = "forestcc.baselines"
# Hamiltonian searches give up after this many steps (then rank order is used).
SEARCH_LIMIT = 200_000


# ---- the topology as seen by rank orders --------------------------------------------------------
def neighbours(topo: Topology, within_box: int | None = None) -> dict[int, dict[int, Fraction]]:
    """rank -> {rank reachable through switches only (or a direct link): the widest path's
    bottleneck bandwidth}. With within_box, only nodes of that box are used."""
    out_links: dict = {}
    for (src, dst), bw in topo.capacities().items():
        out_links.setdefault(src, []).append((dst, bw))
    result = {}
    for node in topo.compute:
        if within_box is not None and node.box != within_box:
            continue
        best = {node.id: Fraction(10**18)}
        reached: dict = {}
        queue = deque([node.id])
        while queue:  # widest paths by relaxation (small graphs)
            v = queue.popleft()
            for w, bw in out_links.get(v, ()):
                target = topo.node(w)
                if within_box is not None and target.box != within_box:
                    continue
                width = min(best[v], bw)
                if target.is_compute:
                    if w != node.id and width > reached.get(target.rank, 0):
                        reached[target.rank] = width
                elif width > best.get(w, 0):
                    best[w] = width
                    queue.append(w)
        result[node.rank] = reached
    return result


def box_layout(topo: Topology):
    """{box: {rail: rank}} when there are two or more boxes, every rank has a box and a rail, and
    all boxes have the same rails, each once; else None."""
    boxes: dict = {}
    for node in topo.compute:
        if node.box is None or node.rail is None:
            return None
        if node.rail in boxes.setdefault(node.box, {}):
            return None
        boxes[node.box][node.rail] = node.rank
    rails = sorted(next(iter(boxes.values()))) if boxes else []
    if len(boxes) < 2 or any(sorted(b) != rails for b in boxes.values()):
        return None
    return dict(sorted(boxes.items()))


def _hamiltonian_paths(nodes, adj, start, end=None, prefer=None, avoid=frozenset(),
                       limit=SEARCH_LIMIT):
    """Paths through all `nodes` from start (to end, if given) along adj, not using the unordered
    pairs in avoid, as they are found; neighbours are tried by `prefer` (a sort key), else widest
    first, fewest onward options next. Stops after `limit` search steps."""
    nodes = set(nodes)
    steps = 0

    def options(v, seen):
        cands = [w for w in adj.get(v, {}) if w in nodes and w not in seen
                 and frozenset((v, w)) not in avoid]
        if prefer is not None:
            return sorted(cands, key=lambda w: prefer(v, w))
        return sorted(cands, key=lambda w: (-adj[v][w], sum(
            1 for x in adj.get(w, {}) if x in nodes and x not in seen), w))

    path, seen = [start], {start}
    stack = [iter(options(start, seen))]
    while stack:  # depth-first, without recursion (rank counts can exceed Python's limit)
        steps += 1
        if steps > limit:
            return
        if len(path) == len(nodes):
            if end is None or path[-1] == end:
                yield list(path)
            stack.pop()
            seen.discard(path.pop())
            continue
        w = next(stack[-1], None)
        if w is None:
            stack.pop()
            seen.discard(path.pop())
            continue
        if w == end and len(path) + 1 < len(nodes):
            continue
        path.append(w)
        seen.add(w)
        stack.append(iter(options(w, seen)))


def _hamiltonian_path(nodes, adj, start, end=None, prefer=None, avoid=frozenset()):
    """The first path _hamiltonian_paths finds, or None."""
    return next(_hamiltonian_paths(nodes, adj, start, end, prefer, avoid), None)


def _cycles(nodes, adj, avoid=frozenset(), limit=SEARCH_LIMIT):
    """Hamiltonian cycles of `nodes` along adj (lists, first node not repeated), as found."""
    nodes = sorted(nodes)
    if len(nodes) < 3:
        if len(nodes) == 2 and nodes[1] in adj.get(nodes[0], {}):
            yield nodes
        return
    start = nodes[0]
    for path in _hamiltonian_paths(nodes, adj, start, avoid=avoid, limit=limit):
        if start in adj.get(path[-1], {}) and frozenset((start, path[-1])) not in avoid:
            yield path


def _pairs(cycle):
    return frozenset(frozenset((a, b)) for a, b in zip(cycle, cycle[1:] + cycle[:1]))


def _cycle(nodes, adj, avoid=frozenset()):
    """A Hamiltonian cycle of `nodes` along adj, or None."""
    return next(_cycles(nodes, adj, avoid), None)


def _two_cycles(nodes, adj):
    """A Hamiltonian cycle and, where one is found, a second sharing no pair with it (the first
    few hundred first cycles are tried)."""
    first = None
    for tried, cycle in enumerate(_cycles(nodes, adj)):
        first = first or cycle
        second = next(_cycles(nodes, adj, avoid=_pairs(cycle), limit=5000), None)
        if second is not None:
            return cycle, second
        if tried >= 200:
            break
    return first, None


def _box_path(adj, rank_of_rail, rails, entry, exit_, upwards):
    """Ranks of one box from the rank on rail `entry` to the one on rail `exit_`, visiting rails
    up (or down) from the entry where the box's links allow."""
    m = len(rails)
    index = {r: i for i, r in enumerate(rails)}

    def prefer(v, w):
        step = (index[rail_of[w]] - index[rail_of[v]]) % m
        return step if upwards else (m - step) % m

    rail_of = {rank: rail for rail, rank in rank_of_rail.items()}
    return _hamiltonian_path(rank_of_rail.values(), adj, rank_of_rail[entry], rank_of_rail[exit_],
                             prefer=prefer)


def ring_orders(topo: Topology) -> list[list[int]]:
    """Rings (rank cycles) that follow the topology; see the module docstring."""
    n = topo.num_ranks
    if n == 1:
        return [[0]]
    adj = neighbours(topo)
    layout = box_layout(topo)
    if layout is not None:
        rings = _rail_rings(layout, adj, {box: neighbours(topo, box) for box in layout})
        if rings is not None:
            return rings
    first, second = _two_cycles(range(n), adj) if n > 3 else (_cycle(range(n), adj), None)
    if first is None:
        return [list(range(n))]
    rings = [first, first[:1] + first[:0:-1]]
    if second is not None:
        rings += [second, second[:1] + second[:0:-1]]
    return rings


def _rail_rings(layout, adj, inside):
    boxes = list(layout)
    rails = sorted(layout[boxes[0]])
    m = len(rails)
    if m == 1:
        ring = [layout[b][rails[0]] for b in boxes]
        return [ring, ring[:1] + ring[:0:-1]]
    rings = []
    for j in range(m):
        order: list = []
        entry = rails[j]
        for position, box in enumerate(boxes):
            upwards = position % 2 == 0
            last_box = position == len(boxes) - 1
            exit_ = rails[(rails.index(entry) + (-1 if upwards else 1)) % m]
            if last_box:
                exit_ = rails[j] if rails[j] != entry else exit_
            path = _box_path(inside[box], layout[box], rails, entry, exit_, upwards)
            if path is None:
                return None
            order += path
            entry = exit_
        if any(b not in adj.get(a, {}) for a, b in zip(order, order[1:] + order[:1])):
            return None
        rings.append(order)
    return rings


# ---- rings as plans -----------------------------------------------------------------------------
class _Ring:
    """A ring over some ranks with one worker per rank, and a channel pair for each step."""

    def __init__(self, b: PlanBuilder, ranks: list[int], worker_of: dict):
        self.b = b
        self.ranks = ranks
        self.worker = worker_of
        n = len(ranks)
        self.right, self.left = {}, {}
        if n > 1:
            for i, r in enumerate(ranks):
                self.right[r], self.left[ranks[(i + 1) % n]] = b.channel_pair(r, ranks[(i + 1) % n])
        self.entered = False

    def enter(self):
        """Tell the left neighbour this rank has entered; wait until the right one has."""
        if self.entered or len(self.ranks) < 2:
            return
        self.entered = True
        for r in self.ranks:
            self.b.signal(r, self.worker[r], self.left[r])
        for r in self.ranks:
            self.b.wait(r, self.worker[r], self.right[r])

    def _send(self, r, spans_here, spans_there, reduce_with=None):
        """Put each span to the right neighbour (reducing first with `reduce_with` spans), then
        signal."""
        b, w, ch = self.b, self.worker[r], self.right[r]
        last = len(spans_here) - 1
        for j, ((src, n), (dst, _)) in enumerate(zip(spans_here, spans_there)):
            if reduce_with is not None:
                b.reduce_put(r, w, ch, src, [src, reduce_with[j][0]], dst, n=n)
                if j == last:
                    b.signal(r, w, ch)
            elif j == last:
                b.put_signal(r, w, ch, src, dst, n=n)
            else:
                b.put(r, w, ch, src, dst, n=n)

    def all_gather(self, units, loc):
        """Position i starts with unit units[i] at loc(rank, unit) (a list of (ref, n) spans);
        at the end every rank has every unit there. n-1 steps, each one unit per rank."""
        n = len(self.ranks)
        if n < 2:
            return
        self.enter()
        for i, r in enumerate(self.ranks):
            right = self.ranks[(i + 1) % n]
            for t in range(n - 1):
                if t > 0:
                    self.b.wait(r, self.worker[r], self.left[r])
                u = units[(i - t) % n]
                self._send(r, loc(r, u), loc(right, u))
            self.b.wait(r, self.worker[r], self.left[r])

    def reduce_scatter(self, units, src, dst, slot):
        """Every rank contributes src(rank, unit) for every unit; position i ends with unit
        units[i] reduced over the ring at dst(rank, unit). Partial sums travel right into
        slot(rank, unit) (scratch spans, each unit at most once per rank)."""
        n = len(self.ranks)
        b = self.b
        if n < 2:
            for r in self.ranks:
                for (s, m), (d, _) in zip(src(r, units[0]), dst(r, units[0])):
                    if s != d:
                        b.copy(r, self.worker[r], s, d, n=m)
            return
        self.enter()
        for i, r in enumerate(self.ranks):
            w = self.worker[r]
            right = self.ranks[(i + 1) % n]
            u = units[(i - 1) % n]
            self._send(r, src(r, u), slot(right, u))
            for s in range(1, n - 1):
                b.wait(r, w, self.left[r])
                u = units[(i - s - 1) % n]
                self._send(r, slot(r, u), slot(right, u), reduce_with=src(r, u))
            b.wait(r, w, self.left[r])
            u = units[i]
            for (d, m), (s_ref, _), (sl, _) in zip(dst(r, u), src(r, u), slot(r, u)):
                b.reduce(r, w, d, [s_ref, sl], n=m)


def _build(b: PlanBuilder, algorithm: str, topo: Topology, max_slices=1, **params) -> dict:
    # share_ops: the builder is not used again, and copying every op dict would double the peak
    # memory of a 1,024-rank ring plan (17 million ops).
    return b.build(generator=f"{GENERATOR}.{algorithm}", params=dict(params, in_place=b.in_place),
                   max_slices=max_slices, min_slice_bytes=64 * 1024 if max_slices > 1 else 0,
                   topology_fingerprint=topo.fingerprint(), share_ops=True)


def _one_ring(b: PlanBuilder, ring: _Ring, collective: str, i: int, k: int) -> None:
    """Ring i of a ring plan: it carries part i of every block (all_gather, reduce_scatter) or
    chunks i*n .. i*n+n-1 of the vector (all_reduce). Units are blocks, named by their rank, and
    the rank at each position of the ring owns its own."""
    n = len(ring.ranks)
    owned = list(ring.ranks)
    if collective == plan_ops.ALL_GATHER:
        if not b.in_place:
            for r in ring.ranks:
                b.copy(r, ring.worker[r], (IN, i), (OUT, r * k + i))
        ring.all_gather(owned, lambda r, u: [((OUT, u * k + i), 1)])
    elif collective == plan_ops.REDUCE_SCATTER:
        ring.reduce_scatter(owned, lambda r, u: [((IN, u * k + i), 1)],
                            lambda r, u: [((OUT, i), 1)],
                            lambda r, u: [((SCR, u * k + i), 1)])
    else:
        ring.reduce_scatter(owned, lambda r, u: [((IN, i * n + u), 1)],
                            lambda r, u: [((OUT, i * n + u), 1)],
                            lambda r, u: [((SCR, i * n + u), 1)])
        ring.all_gather(owned, lambda r, u: [((OUT, i * n + u), 1)])


def ring_plan(topo: Topology, collective: str = "all_reduce", in_place: bool = False) -> dict:
    """Rings from ring_orders, the data split evenly over them, one worker per ring and rank."""
    n = topo.num_ranks
    rings = ring_orders(topo)
    q = len(rings)
    if collective == plan_ops.ALL_REDUCE:
        k = q * n  # ring i's unit u: chunk i*n + u
    elif collective in (plan_ops.ALL_GATHER, plan_ops.REDUCE_SCATTER):
        k = q      # ring i carries part i of every block
    else:
        raise ValueError(f"ring baseline: unsupported collective {collective!r}")
    b = PlanBuilder(collective, n, chunks_per_block=k, in_place=in_place,
                    name=f"ring_{collective}_{topo.name}")
    for i, order in enumerate(rings):
        _one_ring(b, _Ring(b, order, {r: b.worker(r) for r in range(n)}), collective, i, k)
    return _build(b, "ring", topo, rings=len(rings))


# ---- double binary tree -------------------------------------------------------------------------
def _binary_tree(n: int, shift: int = 0) -> list[tuple[int, int]]:
    """Arcs (parent, child) of a balanced in-order binary tree over positions 0..n-1 (position p
    is unit (p + shift) mod n), parents before children."""
    arcs = []

    def build(lo, hi, parent):
        if lo > hi:
            return
        mid = (lo + hi) // 2
        if parent is not None:
            arcs.append(((parent + shift) % n, (mid + shift) % n))
        build(lo, mid - 1, mid)
        build(mid + 1, hi, mid)

    build(0, n - 1, None)
    root = ((n - 1) // 2 + shift) % n
    ordered, frontier = [], [root]
    while frontier:  # breadth first, so parents come first
        nxt = []
        for v in frontier:
            for a in arcs:
                if a[0] == v:
                    ordered.append(a)
                    nxt.append(a[1])
        frontier = nxt
    return ordered


def double_binary_tree_plan(topo: Topology, collective: str = "all_reduce",
                            in_place: bool = False, max_slices: int = 64) -> dict:
    """NCCL's double binary tree all_reduce mapped onto the topology (see the module docstring)."""
    if collective != plan_ops.ALL_REDUCE:
        raise ValueError("the double binary tree baseline is an all_reduce (as in NCCL)")
    n = topo.num_ranks
    layout = box_layout(topo)
    groups = []  # (units: list of rank chains, first rank of each chain is the unit's leader)
    if layout is not None:
        inside = {box: neighbours(topo, box) for box in layout}
        rails = sorted(layout[next(iter(layout))])
        chains_ok = True
        for j in range(len(rails)):
            chains = []
            for box in layout:
                path = _box_path(inside[box], layout[box], rails, rails[j],
                                 rails[(j - 1) % len(rails)], True) if len(rails) > 1 \
                    else [layout[box][rails[0]]]
                if path is None:
                    chains_ok = False
                    break
                chains.append(path)
            groups.append(chains)
        if not chains_ok:
            groups = []
    if not groups:
        order = ring_orders(topo)[0]
        groups = [[[r] for r in order]]
    specs = []
    for chains in groups:
        units = len(chains)
        for shift in (0, 1):
            arcs = [(chains[a][0], chains[c][0]) for a, c in _binary_tree(units, shift)]
            for chain in chains:
                arcs += list(zip(chain, chain[1:]))
            root = chains[((units - 1) // 2 + shift) % units][0]
            specs.append(TreeSpec(root, tuple(arcs), len(specs), 1))
    builder, _ = compile_trees(plan_ops.ALL_REDUCE, n, specs, len(specs), in_place=in_place,
                               name=f"double_binary_tree_{topo.name}")
    return _build(builder, "double_binary_tree", topo, max_slices=max_slices, trees=len(specs))


# ---- hierarchical -------------------------------------------------------------------------------
def hierarchical_plan(topo: Topology, collective: str = "all_reduce",
                      in_place: bool = False) -> dict:
    """Inside boxes, across boxes on each rail, inside boxes again (see the module docstring).
    Needs two or more boxes with the same rails (ValueError otherwise)."""
    layout = box_layout(topo)
    if layout is None:
        raise ValueError(f"{topo.name}: the hierarchical baseline needs two or more boxes whose "
                         "ranks have rails")
    n = topo.num_ranks
    boxes = list(layout)
    nb = len(boxes)
    rails = sorted(layout[boxes[0]])
    m = len(rails)
    # One cycle of rails, valid in every box: inside-box ring positions map to the same rails, so
    # position p of every box is rank (box, rail_cycle[p]), joined across boxes by its rail.
    adj0 = neighbours(topo, within_box=boxes[0])
    if m > 1:
        cycle0 = _cycle(list(layout[boxes[0]].values()), adj0)
        if cycle0 is None:
            raise ValueError(f"{topo.name}: no ring through the ranks of box {boxes[0]}")
        rail_of = {rank: rail for rail, rank in layout[boxes[0]].items()}
        rail_cycle = [rail_of[r] for r in cycle0]
    else:
        rail_cycle = rails
    rank = {(bx, rl): layout[bx][rl] for bx in boxes for rl in rails}
    if collective == plan_ops.ALL_REDUCE:
        k = m * nb
    elif collective in (plan_ops.ALL_GATHER, plan_ops.REDUCE_SCATTER):
        k = 1
    else:
        raise ValueError(f"hierarchical baseline: unsupported collective {collective!r}")
    b = PlanBuilder(collective, n, chunks_per_block=k, in_place=in_place,
                    name=f"hierarchical_{collective}_{topo.name}")
    worker = {r: b.worker(r) for r in range(n)}
    box_rings = [_Ring(b, [rank[(bx, rl)] for rl in rail_cycle], worker) for bx in boxes]
    rail_rings = [_Ring(b, [rank[(bx, rl)] for bx in boxes], worker) for rl in rail_cycle]
    positions = list(range(m))
    box_units = list(range(nb))
    if collective == plan_ops.ALL_REDUCE:
        # part p (m*nb chunks in all): chunks p*nb .. p*nb+nb-1; its piece j: chunk p*nb + j
        def part(p):
            return [((IN, p * nb), nb)]
        for ring in box_rings:
            ring.reduce_scatter(positions, lambda r, p: part(p),
                                lambda r, p: [((OUT, p * nb), nb)],
                                lambda r, p: [((SCR, p * nb), nb)])
        for p, ring in enumerate(rail_rings):
            def piece(j, buf=OUT, base=0, p=p):
                return [((buf, base + p * nb + j), 1)]
            ring.reduce_scatter(box_units, lambda r, j: piece(j), lambda r, j: piece(j),
                                lambda r, j: piece(j, SCR, k))
            ring.all_gather(box_units, lambda r, j: piece(j))
        for ring in box_rings:
            ring.all_gather(positions, lambda r, p: [((OUT, p * nb), nb)])
    elif collective == plan_ops.ALL_GATHER:
        if not in_place:
            for r in range(n):
                b.copy(r, worker[r], (IN, 0), (OUT, r))
        for p, ring in enumerate(rail_rings):
            ring.all_gather(box_units, lambda r, j, p=p: [((OUT, rank[(boxes[j], rail_cycle[p])]), 1)])
        for ring in box_rings:
            ring.all_gather(positions, lambda r, p: [((OUT, rank[(bx, rail_cycle[p])]), 1)
                                                     for bx in boxes])
    else:
        # inside boxes: rank (box, rail) collects the box's sum of the blocks of its rail's ranks
        for ring in box_rings:
            ring.reduce_scatter(
                positions,
                lambda r, p: [((IN, rank[(bx, rail_cycle[p])]), 1) for bx in boxes],
                lambda r, p: [((SCR, n + j), 1) for j in range(nb)],
                lambda r, p: [((SCR, rank[(bx, rail_cycle[p])]), 1) for bx in boxes])
        for ring in rail_rings:  # across boxes: rank (box, rail) gets its own block's sum
            ring.reduce_scatter(box_units, lambda r, j: [((SCR, n + j), 1)],
                                lambda r, j: [((OUT, 0), 1)],
                                lambda r, j: [((SCR, n + nb + j), 1)])
    return _build(b, "hierarchical", topo, boxes=nb, rails=m)


BASELINES = {
    "ring": ring_plan,
    "tree": double_binary_tree_plan,
    "hierarchical": hierarchical_plan,
}
