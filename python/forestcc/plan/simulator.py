"""Plan simulator: how long a plan takes on a topology, event by event.

    from forestcc.plan.simulator import Simulator, simulate
    result = simulate(plan, topology.preset("dgx-a100x2"), size=1 << 30)
    print(result.time_us, result.algbw, result.busbw)
    prepared = Simulator(plan, topo)            # many sizes: validate, route and decode once
    rows = [prepared.run(size) for size in (1 << 20, 1 << 30)]

Where the work is done: this module decides everything that is not the event loop (the plan's
channels and partners, each channel's route, each op's chunks, the slices of a size) and hands it
over as flat arrays (SimInput). The event loop runs in C++ (cpp/src/sim/event_loop.cpp, about
16 times faster: over a million transfers per second); simulator_reference.py is the same loop
in Python (``engine="python"``), the readable statement of the rules below, and the two give the
same time to the last bit (tests/test_simulator_native.py).

The model, in the words of the plan format (``schedules/README.md``):

* Rank i is the topology's i-th compute node. All ranks enter at time 0.
* A worker runs its op list once per slice (the plan's ``pipeline``), blocking only at ``wait``
  (until the partner's matching signal has arrived), at ``flush`` (until the channel's ops are
  delivered) and for local work: ``copy`` and ``reduce`` take bytes x sources / ``mem_bw`` (free
  when ``mem_bw`` is None; ``get_reduce`` is a get, a flush and a reduce). ``put``, ``get``,
  ``signal`` and the put of ``reduce_put`` are handed
  to their channel and carried out asynchronously, one after the other in channel order, as a
  proxy thread or a DMA engine does.
* A transfer follows a physical path: the route the plan's provenance records for that channel
  (``params.routes`` / ``params.channel_routes``, written by the forest compiler), otherwise the
  fastest path through switches only (compute nodes do not forward; where no such path exists the
  fastest path through any nodes is used and a note says so).
* Every directed link is a processor-sharing server: the n transfers on it each get 1/n of its
  bandwidth. A transfer is served by all links of its path at once (cut-through) and has been sent
  when the last of them has carried all its bytes (to within rounding, or with a remainder that
  would take less time than the clock can add to now: time always moves on); it arrives the
  path's summed latency later,
  never before an earlier op of the same channel. The next op of the channel starts when it has
  been sent. A signal carries no bytes: it arrives one path latency after it was issued, behind
  everything sent before it on its channel.
* The time is when the last worker has finished and everything it sent has arrived.

Each link shares on its own (a transfer held back by one hop keeps its share of the others until
it has been served there too, where max-min fairness would hand it on), which keeps an event
O(hops x log) and every link work-conserving. Workers issue channel ops without cost: the model
is a GPU's or a proxy's, not the CPU executor's, whose worker threads copy each put themselves.

Sizes follow nccl-tests: ``size`` is the whole buffer (the output of all_gather, the input of
reduce_scatter, the vector of all_reduce); algbw = size / time, busbw = algbw x factor.
"""
from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field, replace

from . import format as plan_format
from . import geometry, ops
from .simulator_reference import (FLAG_GET, FLAG_SIGNAL_AFTER, K_FLUSH, K_LOCAL, K_SIGNAL,
                                  K_WAIT, K_XFER, OP_FIELDS, run_reference)

__all__ = [
    "SimInput",
    "SimResult",
    "SimulationError",
    "Simulator",
    "bus_factor",
    "element_count",
    "plan_routes",
    "simulate",
]

# Collectives whose nccl-tests size is count x nranks (count per rank or per peer).
_SIZE_TIMES_N = frozenset({ops.ALL_GATHER, ops.REDUCE_SCATTER, ops.ALL_TO_ALL, ops.GATHER,
                           ops.SCATTER})


class SimulationError(ValueError):
    """A plan that cannot be simulated on a topology (wrong rank count, deadlock, no route)."""


@dataclass
class SimResult:
    """Outcome of simulate(): time in microseconds, bandwidths in GB/s (nccl-tests' formulas)."""
    name: str
    collective: str
    nranks: int
    size: int          # bytes actually moved per the nccl-tests convention (count rounded down)
    count: int         # elements per block
    slices: int
    time_us: float
    transfers: int
    notes: list = field(default_factory=list)

    @property
    def algbw(self) -> float:
        """size / time in GB/s (1e9 bytes per second)."""
        return self.size / self.time_us / 1e3 if self.time_us > 0 else math.inf

    @property
    def busbw(self) -> float:
        """algbw x the collective's bus factor (comparable with a link's bandwidth)."""
        return self.algbw * bus_factor(self.collective, self.nranks)

    def __str__(self) -> str:
        return (f"{self.name}: {self.collective} of {self.size} B on {self.nranks} ranks, "
                f"{self.slices} slice(s): {self.time_us:.2f} us, algbw {self.algbw:.2f} GB/s, "
                f"busbw {self.busbw:.2f} GB/s")


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw factor."""
    n = nranks
    if collective == ops.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in _SIZE_TIMES_N:
        return (n - 1) / n
    return 1.0


def element_count(collective: str, nranks: int, size: int, elem_size: int = 4) -> int:
    """Elements per block (the plan's base count c) for an nccl-tests size in bytes."""
    if collective == ops.BARRIER:
        return 0
    per = elem_size * (nranks if collective in _SIZE_TIMES_N else 1)
    return size // per


# ---- topology: links and paths ------------------------------------------------------------------
class _Network:
    """Directed links merged per (src, dst) (bandwidths added, smallest latency), and paths."""

    def __init__(self, topo):
        self.topo = topo
        merged: dict = {}
        for link in topo.links:
            entry = merged.setdefault((link.src, link.dst), [0.0, float(link.latency)])
            entry[0] += float(link.bandwidth)
            entry[1] = min(entry[1], float(link.latency))
        self.link_ids = {key: i for i, key in enumerate(sorted(merged))}
        self.bandwidth = [0.0] * len(merged)  # bytes per microsecond (GB/s x 1e3)
        self.latency = [0.0] * len(merged)
        self.out: dict = {}
        for key, i in self.link_ids.items():
            self.bandwidth[i] = merged[key][0] * 1e3
            self.latency[i] = merged[key][1]
            self.out.setdefault(key[0], []).append((key[1], i))
        self._paths: dict = {}

    def path_links(self, nodes) -> tuple:
        """Link ids along a node path; SimulationError when a hop is not a link."""
        links = []
        for hop in zip(nodes, nodes[1:]):
            i = self.link_ids.get(hop)
            if i is None:
                raise SimulationError(f"route {list(nodes)} uses {hop[0]} -> {hop[1]}, which is "
                                      f"not a link of {self.topo.name}")
            links.append(i)
        return tuple(links)

    def fastest(self, src: str, dst: str, notes: list) -> tuple:
        """Links of the path with the least time per byte (sum of 1/bandwidth; fewer hops break
        ties) through switches only, or through any node when switches alone do not connect."""
        key = (src, dst)
        if key not in self._paths:
            path = self._dijkstra(src, dst, switches_only=True)
            if path is None:
                path = self._dijkstra(src, dst, switches_only=False)
                if path is None:
                    raise SimulationError(f"{self.topo.name}: no path from {src} to {dst}")
                notes.append(f"no path through switches only from {src} to {dst}; routed "
                             f"through {', '.join(path[1:-1])}")
            self._paths[key] = self.path_links(path)
        return self._paths[key]

    def _dijkstra(self, src, dst, switches_only):
        best = {src: (0.0, 0)}
        parent = {src: None}
        heap = [(0.0, 0, src)]
        while heap:
            cost, hops, node = heapq.heappop(heap)
            if node == dst:
                path = [dst]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1]
            if (cost, hops) > best[node]:
                continue
            if node != src and switches_only and self.topo.node(node).is_compute:
                continue
            for nxt, link in self.out.get(node, ()):
                candidate = (cost + 1.0 / self.bandwidth[link], hops + 1)
                if nxt not in best or candidate < best[nxt]:
                    best[nxt] = candidate
                    parent[nxt] = node
                    heapq.heappush(heap, (candidate[0], candidate[1], nxt))
        return None


def plan_routes(plan: dict, topo, notes: list | None = None) -> dict:
    """(rank, channel) -> tuple of link ids that data sent by `rank` on `channel` crosses.

    Routes recorded in the provenance (params ``routes``: node-id paths, ``channel_routes``: per
    rank, per channel, an index into ``routes`` or -1) win; the rest take the fastest path."""
    return _routes(plan, _Network(topo), notes if notes is not None else [])


def _recorded_route(recorded, per_channel, r: int, ch: int):
    """The node path the provenance records for rank r's channel ch, or None (none recorded).
    The provenance is free-form (the validator does not look into it), so a malformed field is
    a SimulationError naming it, not a Python traceback."""
    if recorded is None or per_channel is None:
        return None
    where = f"rank {r} channel {ch}: provenance"
    if not isinstance(per_channel, list) or not isinstance(recorded, list):
        raise SimulationError(f"{where} params 'routes' and 'channel_routes' must be lists")
    if r >= len(per_channel) or not isinstance(per_channel[r], list) or ch >= len(per_channel[r]):
        return None
    index = per_channel[r][ch]
    if index is None or (isinstance(index, int) and not isinstance(index, bool) and index < 0):
        return None
    if not isinstance(index, int) or isinstance(index, bool) or index >= len(recorded):
        raise SimulationError(f"{where} channel_routes[{r}][{ch}] is {index!r}: expected -1 or an index "
                              f"into its {len(recorded)} routes")
    path = recorded[index]
    if not isinstance(path, list) or len(path) < 2 or not all(isinstance(n, str) for n in path):
        raise SimulationError(f"{where} routes[{index}] is {path!r}: expected a list of two or more "
                              f"node ids")
    return path


def _routes(plan, net, notes) -> dict:
    params = plan.get("provenance", {}).get("params", {})
    if not isinstance(params, dict):
        params = {}
    recorded = params.get("routes")
    per_channel = params.get("channel_routes")
    ids = [node.id for node in net.topo.compute]
    out = {}
    for entry in plan["ranks"]:
        r = entry["rank"]
        for ch in entry["channels"]:
            path = _recorded_route(recorded, per_channel, r, ch["id"])
            if path is not None:
                if path[0] != ids[r] or path[-1] != ids[ch["peer"]]:
                    raise SimulationError(f"rank {r} channel {ch['id']}: recorded route {path} "
                                          f"does not join {ids[r]} to {ids[ch['peer']]}")
                out[(r, ch["id"])] = net.path_links(tuple(path))
            elif ch["peer"] == r:
                out[(r, ch["id"])] = ()
            else:
                out[(r, ch["id"])] = net.fastest(ids[r], ids[ch["peer"]], notes)
    return out


# ---- the simulator's input: the model's decisions as flat arrays ------------------------------
@dataclass
class SimInput:
    """What the event loop needs, decided here once per plan and topology (routes, partners,
    decoded ops) and per size (slices), so that the native loop (cpp/src/sim/) and the Python
    reference (simulator_reference.py) run on the same input. Channels are numbered over all
    ranks; ops are OP_FIELDS integers each: kind, channel (-1: none), first chunk, chunks,
    multiplier (a reduction's sources), flags (FLAG_GET, FLAG_SIGNAL_AFTER)."""
    link_bandwidth: list      # bytes per microsecond, per directed link of _Network
    channel_link_start: list  # channel c's links: channel_links[start[c]:start[c + 1]]
    channel_links: array
    channel_latency: list     # the route's summed latency, microseconds
    partner: list             # the channel at the other end
    worker_op_start: list     # worker w's ops: ops[OP_FIELDS * start[w]:OP_FIELDS * start[w + 1]]
    ops: array
    workers: list             # worker index -> (rank, worker id), for messages
    count: int = 0            # per size: elements per block
    chunks_per_block: int = 1
    small_bytes: list = field(default_factory=list)  # per slice: bytes of a chunk of count // k
    big_bytes: list = field(default_factory=list)    # per slice: bytes of a chunk of count // k + 1
    mem_bandwidth: float = 0.0  # bytes per microsecond of local work; 0: free


def _plan_input(plan, net, notes) -> SimInput:
    """The size-independent part of the input."""
    routes = _routes(plan, net, notes)
    # Channels get global ids; partner pairing as the format defines it.
    cid = {}
    for entry in plan["ranks"]:
        for ch in entry["channels"]:
            cid[(entry["rank"], ch["id"])] = len(cid)
    n_ch = len(cid)
    link_start, links, latency = [0] * (n_ch + 1), array("q"), [0.0] * n_ch
    for key, c in cid.items():
        links.extend(routes[key])
        link_start[c + 1] = len(links)
        latency[c] = sum(net.latency[i] for i in routes[key])
    partner = [0] * n_ch
    by_pair: dict = {}
    for entry in plan["ranks"]:
        for ch in entry["channels"]:
            by_pair.setdefault((entry["rank"], ch["peer"]), []).append(ch["id"])
    for (r, p), chans in by_pair.items():
        if r == p:
            for a, b in zip(chans[0::2], chans[1::2]):
                partner[cid[(r, a)]], partner[cid[(r, b)]] = cid[(r, b)], cid[(r, a)]
        else:
            for a, b in zip(chans, by_pair[(p, r)]):
                partner[cid[(r, a)]] = cid[(p, b)]

    ops_out, op_start, workers = array("q"), [0], []
    for entry in plan["ranks"]:
        r = entry["rank"]
        for worker in entry["workers"]:
            for op in worker["ops"]:
                ops_out.extend(_decode(op, cid.get((r, op.get("ch")), -1)))
            op_start.append(len(ops_out) // OP_FIELDS)
            workers.append((r, worker["id"]))
    return SimInput(net.bandwidth, link_start, links, latency, partner, op_start, ops_out,
                    workers, chunks_per_block=plan["chunks_per_block"])


def _decode(op, c) -> tuple:
    """A plan op (on global channel c) as decoded ops, OP_FIELDS integers each."""
    name = op["op"]
    n = ops.op_count(op)
    if name == ops.WAIT:
        return (K_WAIT, c, 0, 0, 0, 0)
    if name == ops.SIGNAL:
        return (K_SIGNAL, c, 0, 0, 0, 0)
    if name == ops.FLUSH:
        return (K_FLUSH, c, 0, 0, 0, 0)
    if name in (ops.PUT, ops.PUT_SIGNAL, ops.GET):
        # A get's bytes travel from the peer: the partner side's route. put_signal's signal
        # travels behind its data, so it rides on the transfer.
        flags = FLAG_GET if name == ops.GET else FLAG_SIGNAL_AFTER if name == ops.PUT_SIGNAL else 0
        return (K_XFER, c, op["src"][1], n, 1, flags)
    if name == ops.COPY:
        return (K_LOCAL, -1, op["src"][1], n, 1, 0)
    if name == ops.GET_REDUCE:
        # the peer's chunks come over (as a get, on the partner side's route), then the
        # worker reduces them with its local sources
        first = op["dst"][1]
        return (K_XFER, c, first, n, 1, FLAG_GET, K_FLUSH, c, 0, 0, 0, 0,
                K_LOCAL, -1, first, n, len(op["srcs"]) + 1, 0)
    if name in (ops.REDUCE_OP, ops.REDUCE_PUT):
        first = op["dst"][1]
        local = (K_LOCAL, -1, first, n, len(op["srcs"]), 0)
        return local + (K_XFER, c, first, n, 1, 0) if name == ops.REDUCE_PUT else local
    raise SimulationError(f"the simulator has no rule for op {name!r}")


def _run_events(sim_input: SimInput, engine: str) -> tuple:
    """(time, transfers, stuck workers) from the chosen event loop."""
    if engine == "python":
        return run_reference(sim_input)
    if engine != "native":
        raise ValueError(f"simulate: engine must be 'native' or 'python', not {engine!r}")
    from .. import _C
    si = sim_input
    return _C.simulate_events(si.link_bandwidth, si.channel_link_start, si.channel_links,
                              si.channel_latency, si.partner, si.worker_op_start, si.ops,
                              si.count, si.chunks_per_block, si.small_bytes, si.big_bytes,
                              si.mem_bandwidth)


class Simulator:
    """One plan on one topology, prepared once (validation, routes, decoded ops) and simulated at
    any number of sizes: ``Simulator(plan, topo).run(size)`` is ``simulate(plan, topo, size)``."""

    def __init__(self, plan: dict, topo, validated: bool = False):
        """validated: the plan has passed plan_format.validate already (a generator's output),
        so it is not validated again (seconds at 1,024 ranks)."""
        if not validated:
            plan_format.validate(plan, plan.get("name", "<plan>") if isinstance(plan, dict)
                                 else "<plan>")
        n = plan["nranks"]
        if topo.num_ranks != n:
            raise SimulationError(f"plan {plan['name']!r} is for {n} ranks but {topo.name} has "
                                  f"{topo.num_ranks} compute nodes")
        # Only the header stays: a large plan's ops are held once, as the compact input.
        self.plan = {key: plan[key] for key in ("name", "nranks", "collective",
                                                "chunks_per_block")}
        self.plan["pipeline"] = plan.get("pipeline", ops.DEFAULT_PIPELINE)
        self.notes: list = []
        self.input = _plan_input(plan, _Network(topo), self.notes)

    def run(self, size: int, elem_size: int = 4, mem_bw: float | None = None,
            engine: str = "native") -> SimResult:
        """One call with an nccl-tests `size` in bytes (see simulate)."""
        plan = self.plan
        n, collective, k = plan["nranks"], plan["collective"], plan["chunks_per_block"]
        count = element_count(collective, n, size, elem_size)
        pipeline = plan["pipeline"]
        slices = geometry.slice_count(pipeline.get("max_slices", 1),
                                      pipeline.get("min_slice_bytes", 0), count, k, elem_size)
        # Slice s of a chunk of L elements has floor((s+1)L/S) - floor(sL/S) elements; chunk
        # lengths are q or q+1 (q = count // k), so two tables give every op's bytes per slice.
        q = count // k
        sim_input = replace(
            self.input, count=count,
            small_bytes=[((s + 1) * q // slices - s * q // slices) * elem_size
                         for s in range(slices)],
            big_bytes=[((s + 1) * (q + 1) // slices - s * (q + 1) // slices) * elem_size
                       for s in range(slices)],
            mem_bandwidth=mem_bw * 1e3 if mem_bw else 0.0)
        time, transfers, stuck = _run_events(sim_input, engine)
        if stuck:
            where = [f"rank {sim_input.workers[w][0]} worker {sim_input.workers[w][1]} at step "
                     f"{pc} of slice {s}" for w, pc, s in stuck]
            raise SimulationError("the plan deadlocks in simulation (run forestcc plan verify): "
                                  + "; ".join(where))
        actual = count * elem_size * (n if collective in _SIZE_TIMES_N else 1)
        return SimResult(plan["name"], collective, n, actual, count, slices, time, transfers,
                         list(self.notes))


def simulate(plan: dict, topo, size: int, elem_size: int = 4, mem_bw: float | None = None,
             engine: str = "native") -> SimResult:
    """Simulates one call of `plan` on `topo` with an nccl-tests `size` in bytes.

    elem_size: bytes per element (4: float). mem_bw: GB/s of local copies and reductions per
    worker (None: free). engine: "native" (the C++ event loop) or "python" (the reference loop,
    same result, about 16 times slower). For many sizes of one plan, Simulator prepares
    the plan once."""
    return Simulator(plan, topo).run(size, elem_size, mem_bw, engine)
