#include "sim/event_loop.hpp"
#include "sim/event_queue.hpp"

#include <algorithm>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>

namespace forestcc::sim {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Event kinds in the order simultaneous events resolve (the reference's _LINK, _SIGNAL, _RESUME).
enum EventKind : int { kLinkEvent = 0, kSignalEvent = 1, kResumeEvent = 2 };

// A transfer waiting to finish on a link: ordered by its virtual finish, then by its id (the
// reference's (virtual finish, transfer id) tuples). The slot holds its state while in flight.
struct Finishing {
  double virtualFinish;
  int64_t id;
  int64_t slot;
  bool operator>(const Finishing& o) const {
    if (virtualFinish != o.virtualFinish) return virtualFinish > o.virtualFinish;
    return id > o.id;
  }
};

struct Flow {
  int64_t channel;
  double latency;
  bool signalAfter;
  int64_t hopsLeft;  // links still serving it
};

// A channel op waiting its turn: bytes (-1: a signal alone) along the route of channel `route`
// (the partner's for a get).
struct Pending {
  int64_t bytes;
  int32_t route;
  bool signalAfter;
};

// What the loop keeps per channel, together so that a channel's turn touches one cache line
// (the loop is bound by memory latency: a 256-rank forest has 100k channels).
struct alignas(64) ChannelState {
  std::vector<Pending> pending;  // ops waiting their turn, from pendingHead on
  double lastArrival = 0;        // in-order arrival on the channel
  int64_t inbound = 0;           // signals arrived at this side
  int64_t waited = 0;            // of which waits have taken this many
  int32_t waiter = -1;           // worker blocked in wait on this channel
  int32_t flusher = -1;          // worker blocked in flush on this channel
  uint32_t pendingHead = 0;
  bool busy = false;             // ops queued or a transfer in service
  bool signalQueued = false;     // one of the channel's signal events is in the event queue
};

// A channel's route: its links are channelLinks[first, last); latency summed over them.
struct Route {
  int64_t first, last;
  double latency;
};

// A signal event not yet in the event queue. A channel's arrivals never go back in time (arrive
// keeps them in channel order) and its signals' sequence numbers grow, so its signal events
// leave the queue in the order they were made: only each channel's next one needs to be in the
// queue, the rest wait in a list per channel, in the same order and with the same keys. This
// keeps the queue small (a forest's roots signal every slice at once) without changing the
// order of any event.
struct QueuedSignal {
  double arrival;
  int64_t seq;
};

template <class T>
using MinHeap = std::priority_queue<T, std::vector<T>, std::greater<T>>;

class Simulation {
 public:
  explicit Simulation(const SimInput& in) : in_(in) {
    check();
    const size_t links = in.linkBandwidth.size(), channels = in.partner.size();
    active_.assign(links, 0);
    virtualTime_.assign(links, 0.0);
    stamp_.assign(links, 0.0);
    finishing_.resize(links);
    nextEvent_.assign(links, kNever);
    ch_.resize(channels);
    signals_.resize(channels);
    signalHead_.assign(channels, 0);
    route_.resize(channels);
    for (size_t c = 0; c < channels; ++c)
      route_[c] = {in.channelLinkStart[c], in.channelLinkStart[c + 1], in.channelLatency[c]};
    const size_t workers = in.workerOpStart.size() - 1;
    pc_.assign(workers, 0);
    slice_.assign(workers, 0);
    sizeOps();
  }

  SimOutput run() {
    const int64_t workers = int64_t(pc_.size());
    for (int64_t w = 0; w < workers; ++w) runWorker(w);
    while (!events_.empty()) {
      const Event e = events_.pop();
      now_ = e.time;
      if (e.kind == kLinkEvent) {
        if (e.time == nextEvent_[e.subject]) linkEvent(e.subject);
      } else if (e.kind == kSignalEvent) {
        nextSignal(e.subject);
        signalArrived(e.subject);
      } else {
        runWorker(e.subject);
      }
    }
    SimOutput out;
    out.transfers = transfers_;
    if (doneWorkers_ != workers) {
      for (int64_t w = 0; w < workers && out.stuck.size() < 5; ++w)
        if (slice_[w] < slices()) out.stuck.push_back({w, pc_[w], slice_[w]});
    }
    out.timeUs = now_;
    for (const ChannelState& ch : ch_) out.timeUs = std::max(out.timeUs, ch.lastArrival);
    return out;
  }

 private:
  int64_t slices() const { return int64_t(in_.smallBytes.size()); }

  void check() const {
    const auto fail = [](const std::string& what) {
      throw std::invalid_argument("simulator input: " + what);
    };
    const int64_t links = int64_t(in_.linkBandwidth.size());
    const int64_t channels = int64_t(in_.partner.size());
    if (channels > std::numeric_limits<int32_t>::max() ||
        int64_t(in_.workerOpStart.size()) > std::numeric_limits<int32_t>::max())
      fail("more than 2^31 channels or workers");
    if (in_.smallBytes.size() != in_.bigBytes.size() || in_.smallBytes.empty())
      fail("per-slice byte tables must be non-empty and of equal length");
    if (int64_t(in_.channelLinkStart.size()) != channels + 1 ||
        int64_t(in_.channelLatency.size()) != channels)
      fail("channel tables disagree on the channel count");
    if (in_.channelLinkStart.front() != 0 ||
        in_.channelLinkStart.back() != int64_t(in_.channelLinks.size()))
      fail("channel link offsets do not cover the link list");
    for (int64_t c = 0; c < channels; ++c)
      if (in_.channelLinkStart[c] > in_.channelLinkStart[c + 1]) fail("channel link offsets decrease");
    for (int64_t l : in_.channelLinks)
      if (l < 0 || l >= links) fail("link id " + std::to_string(l) + " out of range");
    for (double bw : in_.linkBandwidth)
      if (!(bw > 0)) fail("a link bandwidth is not positive");
    for (int64_t p : in_.partner)
      if (p < 0 || p >= channels) fail("partner channel " + std::to_string(p) + " out of range");
    if (in_.workerOpStart.empty() || in_.workerOpStart.front() != 0 ||
        in_.workerOpStart.back() * kOpFields != int64_t(in_.ops.size()))
      fail("worker op offsets do not cover the op list");
    for (size_t w = 0; w + 1 < in_.workerOpStart.size(); ++w)
      if (in_.workerOpStart[w] > in_.workerOpStart[w + 1]) fail("worker op offsets decrease");
    if (in_.count < 0 || in_.chunksPerBlock < 1) fail("count must be >= 0 and chunks per block >= 1");
    for (size_t i = 0; i < in_.ops.size(); i += kOpFields) {
      const int64_t kind = in_.ops[i], c = in_.ops[i + 1];
      if (kind < kWait || kind > kLocal) fail("op kind " + std::to_string(kind));
      if (kind != kLocal && (c < 0 || c >= channels))
        fail("op channel " + std::to_string(c) + " out of range");
      if (in_.ops[i + 2] < 0 || in_.ops[i + 3] < 0 || in_.ops[i + 4] < 0)
        fail("op chunks and multiplier must be >= 0");
    }
  }

  // Each op's chunks of q and of q + 1 elements (times its multiplier): chunk lengths differ by
  // at most one element, so two per-slice byte tables give every op's bytes
  // (geometry.chunk_element_range in Python).
  void sizeOps() {
    const int64_t c = in_.count, k = in_.chunksPerBlock, q = c / k;
    const auto startOf = [&](int64_t i) { return (i / k) * c + ((i % k) * c) / k; };
    const size_t n = in_.ops.size() / kOpFields;
    opSmall_.resize(n);
    opBig_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t* op = in_.ops.data() + kOpFields * i;
      const int64_t first = op[2], chunks = op[3], times = op[4];
      const int64_t big = (startOf(first + chunks) - startOf(first)) - chunks * q;
      opSmall_[i] = (chunks - big) * times;
      opBig_[i] = big * times;
    }
  }

  void push(double time, int kind, int64_t subject) { events_.push({time, kind, ++seq_, subject}); }

  // Brings link l's virtual time (bytes served per transfer) up to now.
  void advance(int64_t l) {
    const int64_t n = active_[l];
    if (n) virtualTime_[l] += (now_ - stamp_[l]) * in_.linkBandwidth[l] / double(n);
    stamp_[l] = now_;
  }

  // When link l's first transfer to finish would be done at the link's current share (its heap
  // must not be empty), never before now.
  double finishTime(int64_t l) const {
    const double when = now_ + (finishing_[l].top().virtualFinish - virtualTime_[l]) *
                                   double(active_[l]) / in_.linkBandwidth[l];
    return std::max(when, now_);
  }

  // Link events are pushed only when a link's next completion moves earlier; one that fires
  // early (the link got busier since) finds nothing done and reschedules itself.
  void reschedule(int64_t l) {
    auto& heap = finishing_[l];
    if (heap.empty()) {
      nextEvent_[l] = kNever;
      return;
    }
    const double when = finishTime(l);
    if (when < nextEvent_[l]) {
      nextEvent_[l] = when;
      push(when, kLinkEvent, l);
    }
  }

  // Arrival of what channel c sent now over a route of `latency`: in channel order.
  void arrive(int64_t c, double latency, bool signalAfter) {
    const double arrival = std::max(now_ + latency, ch_[c].lastArrival);
    ch_[c].lastArrival = arrival;
    if (!signalAfter) return;
    if (ch_[c].signalQueued) {
      signals_[c].push_back({arrival, ++seq_});
    } else {
      ch_[c].signalQueued = true;
      push(arrival, kSignalEvent, c);
    }
  }

  // Channel c's signal at the head of the event queue has been taken: its next one goes in.
  void nextSignal(int64_t c) {
    auto& queue = signals_[c];
    size_t& head = signalHead_[c];
    if (head == queue.size()) {
      queue.clear();
      head = 0;
      ch_[c].signalQueued = false;
      return;
    }
    const QueuedSignal next = queue[head++];
    events_.push({next.arrival, kSignalEvent, next.seq, c});
  }

  // Starts channel c's pending ops until one occupies links.
  void startChannel(int64_t c) {
    auto& queue = ch_[c].pending;
    uint32_t& head = ch_[c].pendingHead;
    while (head < queue.size()) {
      const Pending op = queue[head++];
      const Route& route = route_[op.route];
      const int64_t first = route.first, last = route.last;
      const double latency = route.latency;
      if (op.bytes <= 0 || first == last) {
        arrive(c, latency, op.signalAfter);
        continue;
      }
      int64_t slot;
      if (freeSlots_.empty()) {
        slot = int64_t(flows_.size());
        flows_.push_back({});
      } else {
        slot = freeSlots_.back();
        freeSlots_.pop_back();
      }
      flows_[slot] = {c, latency, op.signalAfter, last - first};
      const int64_t id = transfers_++;
      for (int64_t i = first; i < last; ++i) {
        const int64_t l = in_.channelLinks[i];
        advance(l);
        finishing_[l].push({virtualTime_[l] + double(op.bytes), id, slot});
        active_[l] += 1;
        reschedule(l);
      }
      return;
    }
    queue.clear();
    head = 0;
    ch_[c].busy = false;
    const int64_t w = ch_[c].flusher;
    if (w >= 0) {  // nothing left to send: the flush ends at the last arrival
      ch_[c].flusher = -1;
      push(std::max(now_, ch_[c].lastArrival), kResumeEvent, w);
    }
  }

  void linkEvent(int64_t l) {
    nextEvent_[l] = kNever;
    advance(l);
    auto& heap = finishing_[l];
    const double limit = virtualTime_[l] * (1 + 1e-12) + 1e-9;
    // Done: served to within rounding, or so nearly that what is left takes less time than the
    // clock can add to now (the event would be due at now again, and time would never move on:
    // the 512- and 1,024-rank hierarchical all_gather on 300 GB/s links hung so).
    while (!heap.empty() && (heap.top().virtualFinish <= limit || finishTime(l) <= now_)) {
      const int64_t slot = heap.top().slot;
      heap.pop();
      active_[l] -= 1;
      Flow& flow = flows_[slot];
      if (--flow.hopsLeft == 0) {  // sent: it arrives one latency later, in channel order
        const Flow done = flow;
        freeSlots_.push_back(slot);
        arrive(done.channel, done.latency, done.signalAfter);
        startChannel(done.channel);
      }
    }
    reschedule(l);
  }

  void signalArrived(int64_t c) {
    const int64_t p = in_.partner[c];
    ch_[p].inbound += 1;
    const int64_t w = ch_[p].waiter;
    if (w >= 0) {
      ch_[p].waiter = -1;
      runWorker(w);
    }
  }

  void enqueue(int64_t c, Pending op) {
    ch_[c].pending.push_back(op);
    if (!ch_[c].busy) {
      ch_[c].busy = true;  // startChannel clears it when the queue drains
      startChannel(c);
    }
  }

  // Runs worker w from where it stopped until it blocks or has run every slice.
  void runWorker(int64_t w) {
    int64_t pc = pc_[w], s = slice_[w];
    if (s >= slices()) return;
    const int64_t base = in_.workerOpStart[w];
    const int64_t* ops = in_.ops.data() + kOpFields * base;
    const int64_t length = in_.workerOpStart[w + 1] - in_.workerOpStart[w];
    int64_t small = in_.smallBytes[s], big = in_.bigBytes[s];
    const auto stop = [&](int64_t at) {
      pc_[w] = at;
      slice_[w] = s;
    };
    while (true) {
      if (pc == length) {
        if (++s == slices()) {
          stop(pc);
          doneWorkers_ += 1;
          return;
        }
        pc = 0;
        small = in_.smallBytes[s];
        big = in_.bigBytes[s];
        continue;
      }
      const int64_t* op = ops + kOpFields * pc;
      const int64_t c = op[1];
      switch (op[0]) {
        case kWait:
          if (ch_[c].inbound > ch_[c].waited) {
            ch_[c].waited += 1;
          } else {
            ch_[c].waiter = int32_t(w);
            stop(pc);
            return;
          }
          break;
        case kTransfer:  // a get's bytes come from the peer, over its route
          enqueue(c, {opSmall_[base + pc] * small + opBig_[base + pc] * big,
                      int32_t((op[5] & kFlagGet) ? in_.partner[c] : c),
                      (op[5] & kFlagSignalAfter) != 0});
          break;
        case kSignal:
          enqueue(c, {-1, int32_t(c), true});
          break;
        case kFlush:
          if (ch_[c].busy) {
            ch_[c].flusher = int32_t(w);
            stop(pc + 1);
            return;
          }
          if (ch_[c].lastArrival > now_) {
            stop(pc + 1);
            push(ch_[c].lastArrival, kResumeEvent, w);
            return;
          }
          break;
        default: {  // local copy / reduce
          const int64_t bytes = opSmall_[base + pc] * small + opBig_[base + pc] * big;
          if (in_.memBandwidth > 0 && bytes) {
            stop(pc + 1);
            push(now_ + double(bytes) / in_.memBandwidth, kResumeEvent, w);
            return;
          }
        }
      }
      ++pc;
    }
  }

  const SimInput& in_;
  double now_ = 0;
  int64_t seq_ = 0, transfers_ = 0, doneWorkers_ = 0;
  EventQueue events_;
  // links
  std::vector<int64_t> active_;
  std::vector<double> virtualTime_, stamp_, nextEvent_;
  std::vector<MinHeap<Finishing>> finishing_;
  std::vector<Flow> flows_;
  std::vector<int64_t> freeSlots_;
  // channels
  std::vector<ChannelState> ch_;
  std::vector<Route> route_;
  std::vector<std::vector<QueuedSignal>> signals_;  // signal events waiting behind the queued one
  std::vector<size_t> signalHead_;
  // workers
  std::vector<int64_t> pc_, slice_;
  std::vector<int64_t> opSmall_, opBig_;  // per op: chunks of q and of q + 1 elements it moves
};

}  // namespace

SimOutput runEvents(const SimInput& input) { return Simulation(input).run(); }

}  // namespace forestcc::sim
