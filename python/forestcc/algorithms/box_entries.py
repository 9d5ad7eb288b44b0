"""Box entries: how the box rotation's trees enter a box that needs more of the network.

The rotation enters every other box once per tree (``box_rotation``). That is optimal while each
GPU can take the rest of its shards over its box's fabric; a box whose fabric is slower (half its
NVLink, an older generation, one GPU with a degraded link) binds through its single-GPU cuts
instead. Then each GPU v of the box must take at least

    x_v >= k (N - 1) - k τ* fab_in(v)          tree-units over its NIC (the rest over the fabric)
    x_v <= k τ* nic_in(v)                      (its NIC's share of the optimum)

where τ* is the exact cut bound (shards per GB/s), k the trees per root, N the ranks. Entering
the box through more than one rail per tree supplies that: every tree (a *unit*: one of a root's k
trees) keeps its rotation rail and some units get extra rails, so that rail v receives exactly
x_v units. The entries then forward to the box's remaining GPUs over the fabric; which entry feeds
which GPU is a small exact flow problem over *entry patterns* (a set of entry rails, the number of
units that use it) with each GPU's fabric capacity k τ* fab_out(v) - k (m - 1) (its own shard
goes to the m - 1 others directly). Integer flows give integer unit counts.

A rail whose NIC cannot take even the rotation's share (one GPU's NIC slower, or gone) gets a
lower quota: its units move to rails with room. The sending side is the mirror image: a NIC that
cannot send its rotation share out hands units to the other rails of its box, into rails of the
target box with room (``_relieve_senders``).

Nothing here is trusted: the caller builds the trees and accepts them only when the independent
evaluation meets the cut bound exactly. This module decides the per-box amounts; it answers None
when the quotas cannot be met (then the caller falls back to the generic path).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from fractions import Fraction

__all__ = ["EntryPlan", "plan_entries"]

# (root node index, unit index 0..k-1) -> (entry rails in order, {target rail: forwarding rail})
EntryPlan = dict[int, dict[tuple[int, int], tuple[tuple[int, ...], dict[int, int]]]]


def _link_sums(topo, shape):
    """Per compute node: bandwidth in and out over its box's fabric and over the network.
    None when a rank links straight into another box (no fabric/network split to speak of)."""
    sums = {v: [Fraction(0)] * 4 for box in shape.members.values() for v in box.values()}
    box_of = [n.box for n in topo.nodes]
    for (s, d), bw in topo.capacities().items():
        i, j = topo.index[s], topo.index[d]
        for node, other, slot in ((i, j, 1), (j, i, 0)):  # slot 0/1: fabric in/out, 2/3: network
            if node not in sums:
                continue
            if box_of[other] == box_of[node]:
                sums[node][slot] += bw
            elif box_of[other] is None:
                sums[node][slot + 2] += bw
            else:
                return None
    return sums


def plan_entries(topo, shape, tau: Fraction, k: int) -> EntryPlan | None:
    """Extra entries and forwarding for every box whose GPUs need more than one entry per tree,
    and moved entries where a sending NIC cannot carry the rotation's share ({} when nothing
    needs either: the plain rotation), or None when some box's quotas cannot be met."""
    sums = _link_sums(topo, shape)
    if sums is None:
        return None
    n, m = topo.num_ranks, len(shape.rails)
    outside = n - m                      # shards that enter each box from outside
    base = k * outside // m              # units per rail under the rotation alone
    plan: EntryPlan = {}
    for b in shape.box_ids:
        bounds = _quotas(shape, sums, b, tau, k, n, base)
        if bounds is None:
            return None
        quotas, high, capacity = bounds
        if all(q == base for q in quotas.values()):
            continue
        forwards = _entries_and_forwarding(shape, b, quotas, high, base, k, capacity)
        if forwards is None:
            return None
        plan[b] = forwards
    if not _relieve_senders(shape, sums, plan, tau, k):
        return None
    return plan


def _relieve_senders(shape, sums, plan, tau, k) -> bool:
    """Moves rotation entries off the sending NICs that cannot carry them (a slower NIC sends
    less too): into boxes the plan does not decide yet, the units a rail of box b0 would send
    go through other rails of b0 that have room, into rails of the target box that have room.
    Adds those units to `plan` (a partial plan: units not named keep the rotation). False when
    some NIC stays over."""
    m, count = len(shape.rails), len(shape.box_ids)
    position = {x: i for i, x in enumerate(shape.box_ids)}
    nic = {(b, r): (math.floor(k * tau * sums[v][2]), math.floor(k * tau * sums[v][3]))
           for b, members in shape.members.items() for r, v in members.items()}
    sent = {key: k * (count - 1 - sum(1 for b in plan if b != key[0])) for key in nic}
    got = {key: k * (count - 1) for key in nic}
    box_of = {v: b for b, members in shape.members.items() for v in members.values()}
    decided = set(plan)  # boxes that needed more of their NICs: every unit into them is planned
    for b, units in plan.items():
        for (root, _u), (entries, _) in units.items():
            for r in entries:
                sent[(box_of[root], r)] += 1
    over = [key for key in nic if sent[key] > nic[key][1]]
    for b0, r in over:
        for shift in range(1, count):
            b = shape.box_ids[(position[b0] + shift) % count]
            if sent[(b0, r)] <= nic[(b0, r)][1]:
                break
            if b in decided:
                continue
            r_index = shape.rails.index(r)
            root = shape.members[b0][shape.rails[(r_index - shift) % m]]
            moved = plan.setdefault(b, {})
            for u in range(k):
                if sent[(b0, r)] <= nic[(b0, r)][1]:
                    break
                room = [x for x in shape.rails if x != r and sent[(b0, x)] < nic[(b0, x)][1]
                        and got[(b, x)] < nic[(b, x)][0]]
                if not room:
                    continue
                to = max(room, key=lambda x: min(nic[(b0, x)][1] - sent[(b0, x)],
                                                 nic[(b, x)][0] - got[(b, x)]))
                moved[(root, u)] = ((to,), {})
                sent[(b0, r)] -= 1
                sent[(b0, to)] += 1
                got[(b, r)] -= 1
                got[(b, to)] += 1
            if not moved:
                del plan[b]
        if sent[(b0, r)] > nic[(b0, r)][1]:
            return False
    return True


def _quotas(shape, sums, b, tau, k, n, base):
    """(units entering box b per rail, the most each rail's NIC takes, what each rail's fabric can
    forward), or None. A rail starts from the rotation's share, lowered to what its NIC takes (a
    slower NIC: units move to other rails) and raised to what its GPU's fabric leaves to the NIC;
    then rails with room take more until every unit enters somewhere and the fabric can forward
    the rest."""
    m = len(shape.rails)
    outside = n - m
    low, high, fab_out = {}, {}, {}
    for r in shape.rails:
        fab_in, out, nic_in, _ = sums[shape.members[b][r]]
        need = math.ceil(k * (n - 1) - k * tau * fab_in)
        high[r] = min(k * outside, math.floor(k * tau * nic_in))
        fab_out[r] = max(0, math.floor(k * tau * out) - k * (m - 1))
        if need > high[r]:
            return None  # the box's own shards would have to leave it and come back
        low[r] = max(need, min(base, high[r]))
    quotas = dict(low)
    # every unit enters somewhere; then every unit through a NIC spares one fabric delivery
    if not _raise(quotas, high, k * outside - sum(quotas.values())):
        return None
    if not _raise(quotas, high, k * outside * m - sum(quotas.values()) - sum(fab_out.values())):
        return None
    return quotas, high, fab_out


def _raise(quotas, high, missing) -> bool:
    """Adds `missing` units to the quotas, to the rails with the most NIC room first."""
    while missing > 0:
        r = max(quotas, key=lambda r: high[r] - quotas[r])
        room = high[r] - quotas[r]
        if room <= 0:
            return False
        step = min(room, max(1, missing // len(quotas)))
        quotas[r] += step
        missing -= step
    return True


def _entries_and_forwarding(shape, b, quotas, high, base, k, capacity, attempts=16):
    """Extra entries, then who forwards to whom. When some entries cannot forward all that their
    units leave to them (a GPU with a weak fabric link), the shortfall goes to more extra entries
    on the rails with the most NIC room and fabric capacity, which the weak units take first."""
    m = len(shape.rails)
    quotas = dict(quotas)
    for _ in range(attempts):
        units = _assign_extras(shape, b, quotas, base, k, capacity)
        if units is None:
            return None
        forwards, shortfall = _forwarding(units, shape.rails, capacity)
        if forwards is not None:
            return forwards
        more = max(1, -(-shortfall // max(1, m - 2)))
        while more > 0:
            r = max(shape.rails, key=lambda r: (high[r] > quotas[r], capacity[r]))
            if quotas[r] >= high[r]:
                return None
            step = min(more, high[r] - quotas[r])
            quotas[r] += step
            more -= step
    return None


def _assign_extras(shape, b, quotas, base, k, capacity):
    """Every unit from outside box b keeps its rotation rail, unless that rail's quota is below
    the rotation's share (then it moves to the rail with most room); the extras go, one per unit and pass,
    to the rail with the most quota left (ties: the least used sending NIC). Units whose rotation
    rail has the least fabric capacity per entering unit go first; among equals, root by root
    with unit 0 first, so that a root's units differ in as few trees as possible."""
    m = len(shape.rails)
    position = {x: i for i, x in enumerate(shape.box_ids)}
    left = {r: quotas[r] - base for r in shape.rails}
    entries: dict[tuple[int, int], list[int]] = {}
    order = []
    for u in range(k):
        for shift in range(1, len(shape.box_ids)):
            b0 = shape.box_ids[(position[b] - shift) % len(shape.box_ids)]
            for r0_index, r0 in enumerate(shape.rails):
                root = shape.members[b0][r0]
                entries[(root, u)] = [shape.rails[(r0_index + shift) % m]]
                order.append((root, u, b0))
    sent: dict[tuple[int, int], int] = defaultdict(int)
    for root, u, b0 in order:  # a rail short of NIC hands units over to rails with room
        r = entries[(root, u)][0]
        if left[r] >= 0:
            continue
        to = max((x for x in shape.rails if left[x] > 0), key=lambda x: (left[x], -sent[(b0, x)]))
        entries[(root, u)][0] = to
        left[r] += 1
        left[to] -= 1
        sent[(b0, to)] += 1
        sent[(b0, r)] -= 1
    strength = {r: capacity[r] / max(1, quotas[r]) for r in shape.rails}
    order.sort(key=lambda unit: strength[entries[(unit[0], unit[1])][0]])
    while any(left.values()):
        progress = False
        for root, u, b0 in order:
            taken = entries[(root, u)]
            if len(taken) == m:
                continue
            free = [r for r in shape.rails if left[r] > 0 and r not in taken]
            if not free:
                continue
            r = max(free, key=lambda r: (left[r], -sent[(b0, r)]))
            taken.append(r)
            left[r] -= 1
            sent[(b0, r)] += 1
            progress = True
            if not any(left.values()):
                break
        if not progress:
            return None
    return entries


def _forwarding(units, rails, capacity):
    """Assign every (unit, GPU not entered) to one of the unit's entries, within each entry's
    fabric capacity: a max-flow from patterns to forwarding rails, then unit by unit."""
    by_pattern: dict[tuple[int, ...], list[tuple[int, int]]] = defaultdict(list)
    for unit in sorted(units):
        by_pattern[tuple(sorted(units[unit]))].append(unit)
    demands = {(p, t): len(members) for p, members in by_pattern.items()
               for t in rails if t not in p}
    flows, shortfall = _max_flow_split(demands, capacity)
    if flows is None:
        return None, shortfall
    out = {}
    for p, members in by_pattern.items():
        forwards: list[dict[int, int]] = [{} for _ in members]
        for t in rails:
            if t in p:
                continue
            i = 0
            for g, amount in sorted(flows[(p, t)].items()):
                for _ in range(amount):
                    forwards[i][t] = g
                    i += 1
        for unit, fwd in zip(members, forwards):
            out[unit] = (tuple(units[unit]), fwd)
    return out, 0


def _max_flow_split(demands, capacity):
    """({(pattern, target): {rail in pattern: units}}, 0) meeting every demand within the rails'
    capacities, or (None, units that could not be placed). Augmenting paths on the bipartite
    graph (pattern, target) -> rails, which has a few hundred nodes at most."""
    flow = {key: defaultdict(int) for key in demands}
    used = defaultdict(int)
    left = dict(demands)
    for key in demands:
        while left[key] > 0:
            path = _augmenting_path(key, flow, used, capacity)
            if path is None:
                break  # go on with the others: the shortfall is what the flow cannot place
            amount = left[key]
            for (d, g), sign in path:
                if sign < 0:
                    amount = min(amount, flow[d][g])
            amount = min(amount, capacity[path[-1][0][1]] - used[path[-1][0][1]])
            for (d, g), sign in path:
                flow[d][g] += sign * amount
            used[path[-1][0][1]] += amount
            left[key] -= amount
    shortfall = sum(left.values())
    return (None, shortfall) if shortfall else (flow, 0)


def _augmenting_path(start, flow, used, capacity):
    """Shortest alternating path from demand `start` to a rail with spare capacity: steps
    (demand, rail, +1) add flow, (demand, rail, -1) move a previous demand off that rail."""
    parent = {("d", start): None}
    queue = deque([("d", start)])
    while queue:
        kind, x = queue.popleft()
        if kind == "d":
            for g in x[0]:
                if ("r", g) not in parent:
                    parent[("r", g)] = (("d", x), +1)
                    if used[g] < capacity[g]:
                        return _unwind(parent, ("r", g))
                    queue.append(("r", g))
        else:
            for d, split in flow.items():
                if split.get(x, 0) > 0 and ("d", d) not in parent:
                    parent[("d", d)] = (("r", x), -1)
                    queue.append(("d", d))
    return None


def _unwind(parent, end):
    """The augmenting path as [((demand, rail), sign)], the last step reaching `end`'s rail."""
    steps = []
    node = end
    while parent[node] is not None:
        prev, sign = parent[node]
        d, g = (prev[1], node[1]) if sign > 0 else (node[1], prev[1])
        steps.append(((d, g), sign))
        node = prev
    steps.reverse()
    return steps
