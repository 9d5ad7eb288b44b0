"""The simulator's event loop in Python: the reference for the C++ one (cpp/src/sim/).

``simulate(..., engine="python")`` runs it; tests/test_simulator.py checks that both loops give
the same time, to the last bit, on the same input (``simulator.SimInput``: the model of
simulator.py's docstring after routes, ops and slices have been decided). It is the readable
statement of the model and about 16 times slower than the native loop; every line here has
its twin in cpp/src/sim/event_loop.cpp, in the same arithmetic order.
"""
from __future__ import annotations

import heapq
import math
from collections import deque

from . import geometry

# Event kinds, ordered so that simultaneous events resolve deterministically.
_LINK, _SIGNAL, _RESUME = 0, 1, 2
# Decoded ops (SimInput.ops): kind, channel (-1: none), first chunk, chunks, multiplier, flags.
K_WAIT, K_SIGNAL, K_XFER, K_FLUSH, K_LOCAL = 0, 1, 2, 3, 4
OP_FIELDS = 6
FLAG_GET = 1           # the bytes come from the peer, over its route
FLAG_SIGNAL_AFTER = 2  # put_signal: the signal rides behind the data


def run_reference(sim_input) -> tuple:
    """(time in microseconds, transfers, [(worker, op, slice) of unfinished workers, up to 5])."""
    return _Loop(sim_input).run()


class _Loop:
    def __init__(self, si):
        self.slices = len(si.small_bytes)
        self.small, self.big = si.small_bytes, si.big_bytes
        self.mem_bw = si.mem_bandwidth or None
        n_ch = len(si.partner)
        start = si.channel_link_start
        self.links_of = [tuple(si.channel_links[start[c]:start[c + 1]]) for c in range(n_ch)]
        self.latency_of = si.channel_latency
        self.partner = si.partner

        self.queue = [deque() for _ in range(n_ch)]   # pending channel ops
        self.busy = [False] * n_ch                    # ops queued or a transfer in service
        self.last_arrival = [0.0] * n_ch              # in-order arrival on the channel
        self.inbound = [0] * n_ch                     # signals arrived at this side
        self.waited = [0] * n_ch
        self.waiter = [-1] * n_ch                     # worker blocked in wait on this channel
        self.flusher = [-1] * n_ch                    # worker blocked in flush on this channel

        # Links: processor sharing with a per-link virtual time (bytes served per transfer).
        n_links = len(si.link_bandwidth)
        self.bw = si.link_bandwidth
        self.active = [0] * n_links
        self.vtime = [0.0] * n_links
        self.vstamp = [0.0] * n_links
        self.finishing = [[] for _ in range(n_links)]  # heaps of (virtual finish, transfer id)
        self.next_event = [math.inf] * n_links
        self.flows: list = []      # transfer id -> (channel, arrival latency, signal after)
        self.hops_left: list = []  # transfer id -> links still serving it

        # Each op as (kind, channel, a, b, flags): a and b chunks of q and of q + 1 elements
        # (times its multiplier), so two per-slice byte tables give its bytes.
        ops, op_start, count, k = si.ops, si.worker_op_start, si.count, si.chunks_per_block
        self.workers = []  # [ops, pc, slice]
        for w in range(len(op_start) - 1):
            decoded = []
            for i in range(OP_FIELDS * op_start[w], OP_FIELDS * op_start[w + 1], OP_FIELDS):
                kind, c, first, n, times, flags = ops[i:i + OP_FIELDS]
                start, end = geometry.chunk_element_range(first, n, count, k)
                big = (end - start) - n * (count // k)
                decoded.append((kind, c, (n - big) * times, big * times, flags))
            self.workers.append([decoded, 0, 0])
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.transfers = 0
        self.done_workers = 0

    # -- events -----------------------------------------------------------------------------
    # Link events are pushed only when a link's next completion moves earlier; one that fires
    # early (the link got busier since) finds nothing done and reschedules itself.

    def _finish_time(self, link, now):
        """When the link's first transfer to finish would be done at its current share (the
        heap must not be empty), never before now."""
        when = now + (self.finishing[link][0][0] - self.vtime[link]) * self.active[link] \
            / self.bw[link]
        return max(when, now)

    def _reschedule(self, link, now):
        if not self.finishing[link]:
            self.next_event[link] = math.inf
            return
        when = self._finish_time(link, now)
        if when < self.next_event[link]:
            self.next_event[link] = when
            self.seq += 1
            heapq.heappush(self.events, (when, _LINK, self.seq, link))

    def _arrive(self, c, latency, signal):
        """What channel c sent now over a route of `latency` arrives, in channel order."""
        arrival = max(self.now + latency, self.last_arrival[c])
        self.last_arrival[c] = arrival
        if signal:
            self.seq += 1
            heapq.heappush(self.events, (arrival, _SIGNAL, self.seq, c))

    def _start_channel(self, c):
        """Starts the queued ops of channel c until one occupies links. A queued op is (bytes,
        route channel, signal after); bytes -1: a signal alone."""
        queue = self.queue[c]
        now = self.now
        while queue:
            nbytes, route, signal = queue.popleft()
            links, latency = self.links_of[route], self.latency_of[route]
            if nbytes <= 0 or not links:
                self._arrive(c, latency, signal)
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
            heapq.heappush(self.events, (max(now, self.last_arrival[c]), _RESUME, self.seq, w))

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
        # done: served to within rounding, or so nearly that what is left takes less time than
        # the clock can add to now (else the link's event would be due at now for ever)
        while heap and (heap[0][0] <= limit or self._finish_time(link, now) <= now):
            _, fid = heapq.heappop(heap)
            self.active[link] -= 1
            hops_left[fid] -= 1
            if hops_left[fid] == 0:  # sent: it arrives one latency later, in channel order
                c, latency, signal = self.flows[fid]
                self._arrive(c, latency, signal)
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
        decoded = worker[0]
        length = len(decoded)
        pc, s = worker[1], worker[2]
        if s >= self.slices:
            return
        small, big = self.small[s], self.big[s]
        inbound, waited = self.inbound, self.waited
        while True:
            if pc == length:
                s += 1
                if s == self.slices:
                    worker[1], worker[2] = pc, s
                    self.done_workers += 1
                    return
                pc = 0
                small, big = self.small[s], self.big[s]
                continue
            kind, c, a, b, flags = decoded[pc]
            if kind == K_WAIT:
                if inbound[c] > waited[c]:
                    waited[c] += 1
                else:
                    self.waiter[c] = w
                    worker[1], worker[2] = pc, s
                    return
            elif kind == K_XFER:
                # a get's bytes come from the peer, over its route
                self._enqueue(c, (a * small + b * big,
                                  self.partner[c] if flags & FLAG_GET else c,
                                  bool(flags & FLAG_SIGNAL_AFTER)))
            elif kind == K_SIGNAL:
                self._enqueue(c, (-1, c, True))
            elif kind == K_FLUSH:
                if self.busy[c]:
                    self.flusher[c] = w
                    worker[1], worker[2] = pc + 1, s
                    return
                if self.last_arrival[c] > self.now:
                    worker[1], worker[2] = pc + 1, s
                    self.seq += 1
                    heapq.heappush(self.events, (self.last_arrival[c], _RESUME, self.seq, w))
                    return
            else:  # local copy / reduce
                nbytes = a * small + b * big
                if self.mem_bw and nbytes:
                    worker[1], worker[2] = pc + 1, s
                    self.seq += 1
                    heapq.heappush(self.events, (self.now + nbytes / self.mem_bw, _RESUME,
                                                 self.seq, w))
                    return
            pc += 1

    def run(self) -> tuple:
        for w in range(len(self.workers)):
            self._run(w)
        events = self.events
        pop = heapq.heappop
        while events:
            time, kind, _, a = pop(events)
            self.now = time
            if kind == _LINK:
                if time == self.next_event[a]:
                    self._link_event(a)
            elif kind == _SIGNAL:
                self._signal_arrived(a)
            else:
                self._run(a)
        stuck = [(w, wk[1], wk[2]) for w, wk in enumerate(self.workers)
                 if wk[2] < self.slices][:5]
        # Everything sent has arrived by the last arrival on any channel.
        return max([self.now] + self.last_arrival), self.transfers, stuck
