#include "sim/event_loop.hpp"

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

struct Event {
  double time;
  int kind;
  int64_t seq;  // push order: unique, so the order of events is total and the same as Python's
  int64_t subject;  // the link, the channel (signal) or the worker (resume)
  bool operator>(const Event& o) const {
    if (time != o.time) return time > o.time;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

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
  int64_t route;
  bool signalAfter;
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
    pending_.resize(channels);
    pendingHead_.assign(channels, 0);
    busy_.assign(channels, false);
    lastArrival_.assign(channels, 0.0);
    inbound_.assign(channels, 0);
    waited_.assign(channels, 0);
    waiter_.assign(channels, -1);
    flusher_.assign(channels, -1);
    const size_t workers = in.workerOpStart.size() - 1;
    pc_.assign(workers, 0);
    slice_.assign(workers, 0);
    sizeOps();
  }

  SimOutput run() {
    const int64_t workers = int64_t(pc_.size());
    for (int64_t w = 0; w < workers; ++w) runWorker(w);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.time;
      if (e.kind == kLinkEvent) {
        if (e.time == nextEvent_[e.subject]) linkEvent(e.subject);
      } else if (e.kind == kSignalEvent) {
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
    for (double t : lastArrival_) out.timeUs = std::max(out.timeUs, t);
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

  // Link events are pushed only when a link's next completion moves earlier; one that fires
  // early (the link got busier since) finds nothing done and reschedules itself.
  void reschedule(int64_t l) {
    auto& heap = finishing_[l];
    if (heap.empty()) {
      nextEvent_[l] = kNever;
      return;
    }
    double when = now_ + (heap.top().virtualFinish - virtualTime_[l]) * double(active_[l]) /
                             in_.linkBandwidth[l];
    when = std::max(when, now_);
    if (when < nextEvent_[l]) {
      nextEvent_[l] = when;
      push(when, kLinkEvent, l);
    }
  }

  // Arrival of what channel c sent now over a route of `latency`: in channel order.
  void arrive(int64_t c, double latency, bool signalAfter) {
    const double arrival = std::max(now_ + latency, lastArrival_[c]);
    lastArrival_[c] = arrival;
    if (signalAfter) push(arrival, kSignalEvent, c);
  }

  // Starts channel c's pending ops until one occupies links.
  void startChannel(int64_t c) {
    auto& queue = pending_[c];
    size_t& head = pendingHead_[c];
    while (head < queue.size()) {
      const Pending op = queue[head++];
      const int64_t first = in_.channelLinkStart[op.route], last = in_.channelLinkStart[op.route + 1];
      const double latency = in_.channelLatency[op.route];
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
    busy_[c] = false;
    const int64_t w = flusher_[c];
    if (w >= 0) {  // nothing left to send: the flush ends at the last arrival
      flusher_[c] = -1;
      push(std::max(now_, lastArrival_[c]), kResumeEvent, w);
    }
  }

  void linkEvent(int64_t l) {
    nextEvent_[l] = kNever;
    advance(l);
    auto& heap = finishing_[l];
    const double limit = virtualTime_[l] * (1 + 1e-12) + 1e-9;
    while (!heap.empty() && heap.top().virtualFinish <= limit) {
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
    inbound_[p] += 1;
    const int64_t w = waiter_[p];
    if (w >= 0) {
      waiter_[p] = -1;
      runWorker(w);
    }
  }

  void enqueue(int64_t c, Pending op) {
    pending_[c].push_back(op);
    if (!busy_[c]) {
      busy_[c] = true;  // startChannel clears it when the queue drains
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
          if (inbound_[c] > waited_[c]) {
            waited_[c] += 1;
          } else {
            waiter_[c] = w;
            stop(pc);
            return;
          }
          break;
        case kTransfer:  // a get's bytes come from the peer, over its route
          enqueue(c, {opSmall_[base + pc] * small + opBig_[base + pc] * big,
                      (op[5] & kFlagGet) ? in_.partner[c] : c, (op[5] & kFlagSignalAfter) != 0});
          break;
        case kSignal:
          enqueue(c, {-1, c, true});
          break;
        case kFlush:
          if (busy_[c]) {
            flusher_[c] = w;
            stop(pc + 1);
            return;
          }
          if (lastArrival_[c] > now_) {
            stop(pc + 1);
            push(lastArrival_[c], kResumeEvent, w);
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
  MinHeap<Event> events_;
  // links
  std::vector<int64_t> active_;
  std::vector<double> virtualTime_, stamp_, nextEvent_;
  std::vector<MinHeap<Finishing>> finishing_;
  std::vector<Flow> flows_;
  std::vector<int64_t> freeSlots_;
  // channels
  std::vector<std::vector<Pending>> pending_;
  std::vector<size_t> pendingHead_;
  std::vector<bool> busy_;
  std::vector<double> lastArrival_;
  std::vector<int64_t> inbound_, waited_, waiter_, flusher_;
  // workers
  std::vector<int64_t> pc_, slice_;
  std::vector<int64_t> opSmall_, opBig_;  // per op: chunks of q and of q + 1 elements it moves
};

}  // namespace

SimOutput runEvents(const SimInput& input) { return Simulation(input).run(); }

}  // namespace forestcc::sim
