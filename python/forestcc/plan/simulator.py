"""Plan simulator: how long a plan takes on a topology, event by event.

    from forestcc.plan.simulator import simulate
    result = simulate(plan, topology.preset("dgx-a100x2"), size=1 << 30)
    print(result.time_us, result.algbw, result.busbw)

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
  when the last of them has carried all its bytes; it arrives the path's summed latency later,
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
from collections import deque
from dataclasses import dataclass, field

from . import format as plan_format
from . import geometry, ops

__all__ = [
    "SimResult",
    "SimulationError",
    "bus_factor",
    "element_count",
    "plan_routes",
    "simulate",
]

# Collectives whose nccl-tests size is count x nranks (count per rank or per peer).
_SIZE_TIMES_N = frozenset({ops.ALL_GATHER, ops.REDUCE_SCATTER, ops.ALL_TO_ALL, ops.GATHER,
                           ops.SCATTER})

# Event kinds, ordered so that simultaneous events resolve deterministically.
_LINK, _SIGNAL, _RESUME = 0, 1, 2
# Decoded op kinds.
_K_WAIT, _K_SIGNAL, _K_XFER, _K_FLUSH, _K_LOCAL = 0, 1, 2, 3, 4


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


def _routes(plan, net, notes) -> dict:
    params = plan.get("provenance", {}).get("params", {})
    recorded = params.get("routes")
    per_channel = params.get("channel_routes")
    ids = [node.id for node in net.topo.compute]
    out = {}
    for entry in plan["ranks"]:
        r = entry["rank"]
        for ch in entry["channels"]:
            index = -1
            if recorded is not None and per_channel is not None and r < len(per_channel) \
                    and ch["id"] < len(per_channel[r]):
                index = per_channel[r][ch["id"]]
            if index is not None and index >= 0:
                path = recorded[index]
                if path[0] != ids[r] or path[-1] != ids[ch["peer"]]:
                    raise SimulationError(f"rank {r} channel {ch['id']}: recorded route {path} "
                                          f"does not join {ids[r]} to {ids[ch['peer']]}")
                out[(r, ch["id"])] = net.path_links(tuple(path))
            elif ch["peer"] == r:
                out[(r, ch["id"])] = ()
            else:
                out[(r, ch["id"])] = net.fastest(ids[r], ids[ch["peer"]], notes)
    return out


# ---- the event loop -----------------------------------------------------------------------------
class _Simulation:
    def __init__(self, plan, net, count, elem_size, slices, mem_bw, notes):
        self.net = net
        self.slices = slices
        k = plan["chunks_per_block"]
        # Slice s of a chunk of L elements has floor((s+1)L/S) - floor(sL/S) elements; chunk
        # lengths are q or q+1 (q = count // k), so two tables give every op's bytes per slice.
        q = count // k
        self.small = [((s + 1) * q // slices - s * q // slices) * elem_size for s in range(slices)]
        self.big = [((s + 1) * (q + 1) // slices - s * (q + 1) // slices) * elem_size
                    for s in range(slices)]
        self.mem_bw = mem_bw * 1e3 if mem_bw else None
        self.notes = notes

        routes = _routes(plan, net, notes)
        # Channels get global ids; partner pairing as the format defines it.
        cid = {}
        for entry in plan["ranks"]:
            for ch in entry["channels"]:
                cid[(entry["rank"], ch["id"])] = len(cid)
        n_ch = len(cid)
        self.links_of = [()] * n_ch
        self.latency_of = [0.0] * n_ch
        for key, c in cid.items():
            self.links_of[c] = routes[key]
            self.latency_of[c] = sum(net.latency[i] for i in routes[key])
        self.partner = [0] * n_ch
        by_pair: dict = {}
        for entry in plan["ranks"]:
            for ch in entry["channels"]:
                by_pair.setdefault((entry["rank"], ch["peer"]), []).append(ch["id"])
        for (r, p), chans in by_pair.items():
            if r == p:
                for a, b in zip(chans[0::2], chans[1::2]):
                    self.partner[cid[(r, a)]], self.partner[cid[(r, b)]] = cid[(r, b)], cid[(r, a)]
            else:
                for a, b in zip(chans, by_pair[(p, r)]):
                    self.partner[cid[(r, a)]] = cid[(p, b)]

        self.queue = [deque() for _ in range(n_ch)]   # pending channel ops
        self.busy = [False] * n_ch                    # ops queued or a transfer in service
        self.last_arrival = [0.0] * n_ch              # in-order arrival on the channel
        self.inbound = [0] * n_ch                     # signals arrived at this side
        self.waited = [0] * n_ch
        self.waiter = [-1] * n_ch                     # worker blocked in wait on this channel
        self.flusher = [-1] * n_ch                    # worker blocked in flush on this channel

        # Links: processor sharing with a per-link virtual time (bytes served per transfer).
        n_links = len(net.bandwidth)
        self.bw = net.bandwidth
        self.active = [0] * n_links
        self.vtime = [0.0] * n_links
        self.vstamp = [0.0] * n_links
        self.finishing = [[] for _ in range(n_links)]  # heaps of (virtual finish, transfer id)
        self.next_event = [math.inf] * n_links
        self.flows: list = []      # transfer id -> (channel, arrival latency, signal after)
        self.hops_left: list = []  # transfer id -> links still serving it

        # Workers with decoded ops.
        self.workers = []
        for entry in plan["ranks"]:
            r = entry["rank"]
            for worker in entry["workers"]:
                decoded = []
                for op in worker["ops"]:
                    decoded.extend(self._decode(op, r, cid, routes, count, k))
                self.workers.append([r, decoded, 0, 0, worker["id"]])  # rank, ops, pc, slice, id
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.transfers = 0
        self.done_workers = 0

    def _decode(self, op, rank, cid, routes, count, k):
        """An op as tuples (kind, channel, a, b): a, b = chunks of length q and q+1 it touches."""
        name = op["op"]

        def sizes(ref_count):
            start, end = geometry.chunk_element_range(ref_count[0], ref_count[1], count, k)
            big = (end - start) - ref_count[1] * (count // k)
            return ref_count[1] - big, big

        n = ops.op_count(op)
        c = cid.get((rank, op.get("ch")), -1)
        if name == ops.WAIT:
            return [(_K_WAIT, c, 0, 0)]
        if name == ops.SIGNAL:
            return [(_K_SIGNAL, c, 0, 0)]
        if name == ops.FLUSH:
            return [(_K_FLUSH, c, 0, 0)]
        if name in (ops.PUT, ops.PUT_SIGNAL, ops.GET):
            a, b = sizes((op["src"][1], n))
            # A get's bytes travel from the peer: the partner side's route. put_signal's signal
            # travels behind its data, so it rides on the transfer.
            return [(_K_XFER, c, a, b, name == ops.GET, name == ops.PUT_SIGNAL)]
        if name == ops.COPY:
            a, b = sizes((op["src"][1], n))
            return [(_K_LOCAL, -1, a, b)]
        if name == ops.GET_REDUCE:
            # the peer's chunks come over (as a get, on the partner side's route), then the
            # worker reduces them with its local sources
            a, b = sizes((op["dst"][1], n))
            srcs = len(op["srcs"]) + 1
            return [(_K_XFER, c, a, b, True, False), (_K_FLUSH, c, 0, 0),
                    (_K_LOCAL, -1, a * srcs, b * srcs)]
        if name in (ops.REDUCE_OP, ops.REDUCE_PUT):
            a, b = sizes((op["dst"][1], n))
            srcs = len(op["srcs"])
            out = [(_K_LOCAL, -1, a * srcs, b * srcs)]
            if name == ops.REDUCE_PUT:
                out.append((_K_XFER, c, a, b, False, False))
            return out
        raise SimulationError(f"the simulator has no rule for op {name!r}")

    # -- events -----------------------------------------------------------------------------
    # Link events are pushed only when a link's next completion moves earlier; one that fires
    # early (the link got busier since) finds nothing done and reschedules itself.

    def _reschedule(self, link, now):
        heap = self.finishing[link]
        if not heap:
            self.next_event[link] = math.inf
            return
        when = now + (heap[0][0] - self.vtime[link]) * self.active[link] / self.bw[link]
        when = max(when, now)
        if when < self.next_event[link]:
            self.next_event[link] = when
            self.seq += 1
            heapq.heappush(self.events, (when, _LINK, self.seq, link, 0))

    def _start_channel(self, c):
        """Starts the queued ops of channel c until one occupies links. A queued op is (bytes,
        links, latency, signal after); bytes -1: a signal alone."""
        queue = self.queue[c]
        now = self.now
        while queue:
            nbytes, links, latency, signal = queue.popleft()
            if nbytes <= 0 or not links:
                arrival = now + latency
                arrival = max(arrival, self.last_arrival[c])
                self.last_arrival[c] = arrival
                if signal:
                    self.seq += 1
                    heapq.heappush(self.events, (arrival, _SIGNAL, self.seq, c, 0))
                continue
            fid = len(self.flows)
            self.flows.append((c, latency, signal))
            self.hops_left.append(len(links))
            self.transfers += 1
            active, vtime, vstamp, bw, finishing = (self.active, self.vtime, self.vstamp, self.bw,
                                                    self.finishing)
            for link in links:
                n = active[link]
                if n:
                    vtime[link] += (now - vstamp[link]) * bw[link] / n
                vstamp[link] = now
                heapq.heappush(finishing[link], (vtime[link] + nbytes, fid))
                active[link] = n + 1
                self._reschedule(link, now)
            return
        self.busy[c] = False
        w = self.flusher[c]
        if w >= 0:  # the channel has nothing left to send: the flush ends at the last arrival
            self.flusher[c] = -1
            self.seq += 1
            heapq.heappush(self.events, (max(now, self.last_arrival[c]), _RESUME, self.seq, w, 0))

    def _link_event(self, link):
        now = self.now
        self.next_event[link] = math.inf
        n = self.active[link]
        if n:
            self.vtime[link] += (now - self.vstamp[link]) * self.bw[link] / n
        self.vstamp[link] = now
        heap = self.finishing[link]
        hops_left = self.hops_left
        limit = self.vtime[link] * (1 + 1e-12) + 1e-9
        while heap and heap[0][0] <= limit:
            _, fid = heapq.heappop(heap)
            self.active[link] -= 1
            hops_left[fid] -= 1
            if hops_left[fid] == 0:  # sent: it arrives one latency later, in channel order
                c, latency, signal = self.flows[fid]
                arrival = now + latency
                arrival = max(arrival, self.last_arrival[c])
                self.last_arrival[c] = arrival
                if signal:
                    self.seq += 1
                    heapq.heappush(self.events, (arrival, _SIGNAL, self.seq, c, 0))
                self._start_channel(c)
        self._reschedule(link, now)

    def _signal_arrived(self, c):
        p = self.partner[c]
        self.inbound[p] += 1
        w = self.waiter[p]
        if w >= 0:
            self.waiter[p] = -1
            self._run(w)

    # -- workers ----------------------------------------------------------------------------
    def _enqueue(self, c, item):
        self.queue[c].append(item)
        if not self.busy[c]:
            self.busy[c] = True  # _start_channel clears it when the queue drains
            self._start_channel(c)

    def _run(self, w):
        worker = self.workers[w]
        decoded = worker[1]
        length = len(decoded)
        pc, s = worker[2], worker[3]
        if s >= self.slices:
            return
        small, big = self.small[s], self.big[s]
        inbound, waited = self.inbound, self.waited
        while True:
            if pc == length:
                s += 1
                if s == self.slices:
                    worker[2], worker[3] = pc, s
                    self.done_workers += 1
                    return
                pc = 0
                small, big = self.small[s], self.big[s]
                continue
            op = decoded[pc]
            kind, c = op[0], op[1]
            if kind == _K_WAIT:
                if inbound[c] > waited[c]:
                    waited[c] += 1
                else:
                    self.waiter[c] = w
                    worker[2], worker[3] = pc, s
                    return
            elif kind == _K_XFER:
                src = self.partner[c] if op[4] else c  # a get's bytes come from the peer
                self._enqueue(c, (op[2] * small + op[3] * big, self.links_of[src],
                                  self.latency_of[src], op[5]))
            elif kind == _K_SIGNAL:
                self._enqueue(c, (-1, self.links_of[c], self.latency_of[c], True))
            elif kind == _K_FLUSH:
                if self.busy[c]:
                    self.flusher[c] = w
                    worker[2], worker[3] = pc + 1, s
                    return
                if self.last_arrival[c] > self.now:
                    worker[2], worker[3] = pc + 1, s
                    self.seq += 1
                    heapq.heappush(self.events, (self.last_arrival[c], _RESUME, self.seq, w, 0))
                    return
            else:  # local copy / reduce
                nbytes = op[2] * small + op[3] * big
                if self.mem_bw and nbytes:
                    worker[2], worker[3] = pc + 1, s
                    self.seq += 1
                    heapq.heappush(self.events, (self.now + nbytes / self.mem_bw, _RESUME,
                                                 self.seq, w, 0))
                    return
            pc += 1

    def run(self) -> float:
        for w in range(len(self.workers)):
            self._run(w)
        events = self.events
        pop = heapq.heappop
        while events:
            time, kind, _, a, _ = pop(events)
            self.now = time
            if kind == _LINK:
                if time == self.next_event[a]:
                    self._link_event(a)
            elif kind == _SIGNAL:
                self._signal_arrived(a)
            else:
                self._run(a)
        if self.done_workers != len(self.workers):
            stuck = [f"rank {wk[0]} worker {wk[4]} at step {wk[2]} of slice {wk[3]}"
                     for wk in self.workers if wk[3] < self.slices][:5]
            raise SimulationError("the plan deadlocks in simulation (run forestcc plan verify): "
                                  + "; ".join(stuck))
        # Everything sent has arrived by the last arrival on any channel.
        return max([self.now] + self.last_arrival)


def simulate(plan: dict, topo, size: int, elem_size: int = 4, mem_bw: float | None = None
             ) -> SimResult:
    """Simulates one call of `plan` on `topo` with an nccl-tests `size` in bytes.

    elem_size: bytes per element (4: float). mem_bw: GB/s of local copies and reductions per
    worker (None: free)."""
    plan_format.validate(plan, plan.get("name", "<plan>") if isinstance(plan, dict) else "<plan>")
    n = plan["nranks"]
    if topo.num_ranks != n:
        raise SimulationError(f"plan {plan['name']!r} is for {n} ranks but {topo.name} has "
                              f"{topo.num_ranks} compute nodes")
    collective = plan["collective"]
    count = element_count(collective, n, size, elem_size)
    pipeline = plan.get("pipeline", ops.DEFAULT_PIPELINE)
    slices = geometry.slice_count(pipeline.get("max_slices", 1),
                                  pipeline.get("min_slice_bytes", 0), count,
                                  plan["chunks_per_block"], elem_size)
    notes: list = []
    sim = _Simulation(plan, _Network(topo), count, elem_size, slices, mem_bw, notes)
    time = sim.run()
    actual = count * elem_size * (n if collective in _SIZE_TIMES_N else 1)
    return SimResult(plan["name"], collective, n, actual, count, slices, time, sim.transfers,
                     notes)
