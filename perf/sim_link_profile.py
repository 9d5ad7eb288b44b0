"""Where a forest plan loses time against the bound, link by link, in simulation.

    python perf/sim_link_profile.py mi250x4 all_gather [--k K] [--size 1G] [--links 12]

Generates the forest (k: the optimal one unless given), compiles it, and runs the simulator's
Python reference loop (simulator_reference.py, the same model as the C++ loop, to the bit) with
each link's busy periods recorded. Prints:

* the bound's time T* for the size, the forest's own link-load time (its trees' bytes per link
  over the link's bandwidth; equal to T* for an exact forest) and the simulated time;
* for the links the forest loads most (its tight cut: load time / T* = 1), when each starts and
  stops carrying data, how long it is busy, and its idle time split into start-up (before its
  first byte), tail (after its last byte) and gaps in the middle;
* the critical path: from the last arrival back to time 0, each transfer's wait for its channel's
  earlier transfers or for its sender's worker to be woken by a signal, summed per channel.

A link busy from 0 to T* is what the bound assumes; the simulated time exceeds T* by the busy
time the tightest links lose. Slow to run (Python loop): seconds per 100k transfers.
"""
from __future__ import annotations

import argparse
import sys

from forestcc import topology
from forestcc.algorithms.forest import generate_forest
from forestcc.algorithms.forest_plan import compile_forest
from forestcc.plan import simulator as sim
from forestcc.plan import simulator_reference as ref


class _ProfiledLoop(ref._Loop):
    """The reference loop with every link's busy periods ([start, end] while it serves any
    transfer) and every transfer's (channel, bytes, start, sent) recorded."""

    def __init__(self, si):
        super().__init__(si)
        n = len(si.link_bandwidth)
        self.busy_since = [None] * n
        self.periods = [[] for _ in range(n)]
        self.flow_info = []  # transfer id -> [channel, start, sent]
        self.flow_item = {}  # transfer id -> (channel, index in items_of[channel])
        self.cur_w = -1      # the worker running now (who enqueues)
        self.items_of = {}     # channel -> [[enqueued, worker, bytes, started, sent, signals]]
        self.popped = {}       # channel -> items started so far
        self.signals_in = {}   # channel (receiving side) -> [arrival time of each signal]
        self.woken = {}        # worker -> [(time, signalling channel, its signal index)]

    def _mark(self, link):
        if self.active[link] and self.busy_since[link] is None:
            self.busy_since[link] = self.now
        elif not self.active[link] and self.busy_since[link] is not None:
            self.periods[link].append((self.busy_since[link], self.now))
            self.busy_since[link] = None

    def _start_channel(self, c):
        before = len(self.flows)
        qlen = len(self.queue[c])
        super()._start_channel(c)
        items = self.items_of.get(c, [])
        first = self.popped.get(c, 0)
        done = qlen - len(self.queue[c])
        for i in range(first, first + done):
            items[i][3] = self.now
            if items[i][2] <= 0:
                items[i][4] = self.now
        self.popped[c] = first + done
        if len(self.flows) > before:
            self.flow_item[len(self.flows) - 1] = (c, first + done - 1)
        for fid in range(before, len(self.flows)):
            self.flow_info.append([self.flows[fid][0], self.now, None])
            for link in self.links_of[c] + self.links_of[self.partner[c]]:
                self._mark(link)

    # -- the critical path: who waited for whom ---------------------------------------------
    def _run(self, w):
        self.cur_w = w
        super()._run(w)

    def _enqueue(self, c, item):
        self.items_of.setdefault(c, []).append([self.now, self.cur_w, item[0], None, None, item[2]])
        super()._enqueue(c, item)

    def _link_event(self, link):
        heap = self.finishing[link]
        pending = [fid for _, fid in heap]
        super()._link_event(link)
        self._mark(link)
        for fid in pending:
            if self.hops_left[fid] == 0 and self.flow_info[fid][2] is None:
                self.flow_info[fid][2] = self.now
                c, i = self.flow_item[fid]
                self.items_of[c][i][4] = self.now

    def _signal_arrived(self, c):
        p = self.partner[c]
        got = self.signals_in.setdefault(p, [])
        got.append(self.now)
        if self.waiter[p] >= 0:
            self.woken.setdefault(self.waiter[p], []).append((self.now, c, len(got) - 1))
        super()._signal_arrived(c)

    def critical_path(self):
        """Walks back from the last transfer sent: [(kind, time from, time to, channel, worker,
        bytes)], kind 'link' (the transfer in service), 'channel' (queued behind the channel's
        earlier ops), 'worker' (its worker had been blocked in a wait: the signal that woke it
        is followed next)."""
        import bisect
        signal_items = {c: [i for i, it in enumerate(items) if it[5]]
                        for c, items in self.items_of.items()}
        best = None
        for c, items in self.items_of.items():
            for i, it in enumerate(items):
                if it[4] is not None and (best is None or it[4] > best[0]):
                    best = (it[4], c, i)
        _, c, i = best
        path = []
        while True:
            enq, w, nbytes, started, sent, _ = self.items_of[c][i]
            path.append(("link", started, sent, c, w, nbytes))
            if started > enq and i > 0:
                path.append(("channel", enq, started, c, w, 0))
                # behind the earlier op of the channel (which was sent at `started`)
                j = i - 1
                while j > 0 and self.items_of[c][j][4] != started:
                    j -= 1
                i = j
                continue
            # the worker enqueued it when it was woken: by which signal?
            wakes = self.woken.get(w, [])
            k = bisect.bisect_right([t for t, _, _ in wakes], enq) - 1
            if k < 0:
                break
            t, sc, n = wakes[k]
            path.append(("worker", t, enq, c, w, 0))
            c2 = sc
            i = signal_items[c2][n]
            c = c2
        return path


def profile(topo, collective, k, size, max_links, max_slices=None, engine="native"):
    forest = generate_forest(topo, collective, k)
    plan = compile_forest(forest, max_slices=max_slices, engine=engine)
    prepared = sim.Simulator(plan, topo, validated=True)
    native = prepared.run(size)
    # the same SimInput the run used
    from dataclasses import replace
    from forestcc.plan import geometry
    n, kk = plan["nranks"], plan["chunks_per_block"]
    count = sim.element_count(collective, n, size, 4)
    pipeline = prepared.plan["pipeline"]
    slices = geometry.slice_count(pipeline.get("max_slices", 1), pipeline.get("min_slice_bytes", 0),
                                  count, kk, 4)
    q = count // kk
    si = replace(prepared.input, count=count,
                 small_bytes=[((s + 1) * q // slices - s * q // slices) * 4 for s in range(slices)],
                 big_bytes=[((s + 1) * (q + 1) // slices - s * (q + 1) // slices) * 4
                            for s in range(slices)])
    loop = _ProfiledLoop(si)
    t_sim, transfers, stuck = loop.run()
    assert not stuck and t_sim == native.time_us, (t_sim, native.time_us)
    actual = native.size
    t_bound = actual / float(forest.bound_algbw) / 1e3  # us
    t_forest = actual / float(forest.achieved_algbw) / 1e3
    net = sim._Network(topo)
    names = {i: key for key, i in net.link_ids.items()}
    rows = []
    for link, periods in enumerate(loop.periods):
        if not periods:
            continue
        busy = sum(e - s for s, e in periods)
        first, last = periods[0][0], periods[-1][1]
        rows.append((busy, link, first, last, len(periods)))
    rows.sort(reverse=True)
    print(f"{topo.name} {collective} k={forest.k} (optimal {forest.optimal}, natural k "
          f"{forest.natural_k}), {actual} B, {slices} slices, {len(forest.trees)} trees, "
          f"{transfers} transfers")
    print(f"T* (bound) {t_bound:.1f} us; forest link-load time {t_forest:.1f} us "
          f"({t_bound / t_forest:.1%} of bound); simulated {t_sim:.1f} us "
          f"({t_bound / t_sim:.1%})")
    print(f"{'link':34} {'bw':>5} {'busy':>8} {'busy/T*':>7} {'first':>7} {'last':>8} "
          f"{'gaps':>7} {'tail':>7} {'#per':>5}")
    for busy, link, first, last, nper in rows[:max_links]:
        src, dst = names[link]
        gaps = (last - first) - busy
        print(f"{src + '->' + dst:34} {net.bandwidth[link] / 1e3:5.0f} {busy:8.1f} "
              f"{busy / t_bound:7.3f} {first:7.1f} {last:8.1f} {gaps:7.1f} {t_sim - last:7.1f} "
              f"{nper:5d}")
    _print_critical_path(loop, plan, si, names)
    return loop, rows, t_bound, t_sim, forest, plan, si, net


def print_link(loop, plan, si, net, src, dst):
    """The channels on link src -> dst: chunks each carries per slice, when its first transfer
    started and its last was sent, and the longest a transfer waited behind the channel's
    earlier ones (its backlog)."""
    link = net.link_ids[(src, dst)]
    where = [(entry["rank"], ch["id"], ch["peer"]) for entry in plan["ranks"]
             for ch in entry["channels"]]
    chunks: dict = {}
    for entry in plan["ranks"]:
        for worker in entry["workers"]:
            for op in worker["ops"]:
                if op["op"] in ("put", "put_signal", "reduce_put"):
                    key = (entry["rank"], op["ch"])
                    chunks[key] = chunks.get(key, 0) + op.get("n", 1)
    print(f"link {src} -> {dst}:")
    for c in range(len(si.partner)):
        if link not in si.channel_links[si.channel_link_start[c]:si.channel_link_start[c + 1]]:
            continue
        rank, ch, peer = where[c]
        sent = [item for item in loop.items_of.get(c, []) if item[2] > 0]
        if sent:
            print(f"  rank {rank} channel {ch} (worker {loop_worker(si, sent[0][1])}) -> rank "
                  f"{peer}: {chunks.get((rank, ch), 0)} chunks/slice, first {sent[0][3]:.1f}, "
                  f"last sent {sent[-1][4]:.1f}, longest queue wait "
                  f"{max(item[3] - item[0] for item in sent):.1f} us")


def loop_worker(si, w):
    return si.workers[w][1]


def _print_critical_path(loop, plan, si, names):
    """The chain of transfers the last arrival waited for, summed per channel (time in service
    on the channel's links; the rest of the chain is the channel's own queue)."""
    where = [(entry["rank"], ch["id"], ch["peer"]) for entry in plan["ranks"]
             for ch in entry["channels"]]
    per_channel: dict = {}
    for kind, start, end, c, w, _ in loop.critical_path():
        if kind == "link":
            key = (c, w)
            per_channel[key] = per_channel.get(key, 0.0) + end - start
    print("critical path (last arrival back to time 0), time in service per channel:")
    for (c, w), spent in sorted(per_channel.items(), key=lambda kv: -kv[1])[:8]:
        rank, ch, peer = where[c]
        hops = ", ".join(f"{a}->{b}" for a, b in (names[link] for link in si.channel_links[
            si.channel_link_start[c]:si.channel_link_start[c + 1]]))
        print(f"  {spent:8.1f} us  rank {rank} channel {ch} (worker {si.workers[w][1]}) -> rank "
              f"{peer}: {hops}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("topology")
    parser.add_argument("collective")
    parser.add_argument("--k", type=int)
    parser.add_argument("--size", default="1G")
    parser.add_argument("--links", type=int, default=16)
    parser.add_argument("--max-slices", type=int)
    parser.add_argument("--link", nargs=2, action="append", default=[], metavar=("SRC", "DST"),
                        help="also list the channels on this link (repeatable)")
    parser.add_argument("--engine", default="native", help="the plan compiler's (tree_plan.py)")
    args = parser.parse_args(argv)
    size = int(args.size[:-1]) << {"K": 10, "M": 20, "G": 30}[args.size[-1]] \
        if args.size[-1] in "KMG" else int(args.size)
    loop, _, _, _, _, plan, si, net = profile(topology.preset(args.topology), args.collective,
                                              args.k, size, args.links, args.max_slices,
                                              args.engine)
    for src, dst in args.link:
        print_link(loop, plan, si, net, src, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
