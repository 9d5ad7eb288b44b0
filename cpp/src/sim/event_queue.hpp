// The simulator's event queue: a radix heap over event times, with ties in (kind, sequence) order.
//
// Why not a binary heap: the event loop pops tens of millions of events from a queue of tens of
// thousands, and a binary heap's pop walks log2(n) levels of a queue that does not fit in cache
// (the hot spot under perf). Simulated time never goes back: every event is pushed at or after
// the time of the last one popped. A radix heap uses that: the bit pattern of a non-negative
// double grows with its value, and an event waits in the bucket of the highest bit in which its
// time differs from the last time popped. A push appends to a bucket; a pop that finds the
// current-time bucket empty takes the first non-empty bucket, makes its smallest time the
// current one and spreads its events over lower buckets, so each event moves a few times at
// most and always through memory in order. The order of events is exactly the binary heap's:
// by time, then kind, then sequence number (events of the same time wait in a small heap).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace forestcc::sim {

struct Event {
  double time;
  int kind;
  int64_t seq;      // push order: unique, so the order of events is total and the same as Python's
  int64_t subject;  // the link, the channel (signal) or the worker (resume)
  // Order among events of the same time.
  bool after(const Event& o) const { return kind != o.kind ? kind > o.kind : seq > o.seq; }
};

class EventQueue {
 public:
  bool empty() const { return size_ == 0; }

  // Requires time >= the time of the last event popped (and >= 0).
  void push(const Event& e) {
    const uint64_t key = bits(e.time);
    if (key < current_) throw std::logic_error("event queue: an event in the past");
    ++size_;
    if (key == current_) {
      pushNow(e);
    } else {
      buckets_[bucketOf(key)].push_back(e);
    }
  }

  // The earliest event (by time, kind, sequence); the queue must not be empty.
  Event pop() {
    if (now_.empty()) refill();
    std::pop_heap(now_.begin(), now_.end(), Later{});
    const Event e = now_.back();
    now_.pop_back();
    --size_;
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.after(b); }
  };

  static uint64_t bits(double time) {
    uint64_t key;
    std::memcpy(&key, &time, sizeof key);
    return time == 0 ? 0 : key;  // -0.0 sorts as 0
  }
  // 1 + the highest bit in which key differs from the current time (key > current_).
  size_t bucketOf(uint64_t key) const { return 64 - size_t(__builtin_clzll(key ^ current_)); }

  void pushNow(const Event& e) {
    now_.push_back(e);
    std::push_heap(now_.begin(), now_.end(), Later{});
  }

  // Moves the next time's events into now_: the lowest non-empty bucket holds the smallest
  // times, and relative to its smallest time every other event of it falls in a lower bucket.
  void refill() {
    size_t b = 1;
    while (buckets_[b].empty()) ++b;  // size_ > 0, so one is not empty
    auto& from = buckets_[b];
    uint64_t smallest = ~uint64_t(0);
    for (const Event& e : from) smallest = std::min(smallest, bits(e.time));
    current_ = smallest;
    moving_.swap(from);
    for (const Event& e : moving_) {
      const uint64_t key = bits(e.time);
      if (key == current_) {
        pushNow(e);
      } else {
        buckets_[bucketOf(key)].push_back(e);
      }
    }
    moving_.clear();
  }

  uint64_t current_ = 0;  // the bits of the time of the events in now_
  size_t size_ = 0;
  std::vector<Event> now_;  // events at the current time: a heap by (kind, sequence)
  std::array<std::vector<Event>, 65> buckets_;
  std::vector<Event> moving_;
};

}  // namespace forestcc::sim
