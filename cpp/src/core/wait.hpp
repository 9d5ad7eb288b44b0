// Waiting on shared memory: spin first (a spin flag costs ~0.07 us; waking an idle core ~30 us, so
// an early sleep would ruin latency), then yield the core (ranks may outnumber cores), then sleep
// on the rank's doorbell (transport/doorbell.hpp; signals ring it) for a growing interval, so a
// signal that does not ring is still seen within kMaxSleepNs. Every wait has a deadline, watches
// the communicator's abort flag and checks that the peer process is alive, so a lost signal or a
// dead peer becomes an error.
#pragma once

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "transport/control_block.hpp"
#include "transport/doorbell.hpp"
#include "transport/shm/shm_segment.hpp"

namespace forestcc {

// The longest sleep of a wait that has run past its spin and yield phases: a peer that was
// descheduled for a few milliseconds is noticed within this much of its signal.
constexpr long kMaxSleepNs = 200000;

struct WaitPolicy {
  double timeoutSeconds;
  double spinMicroseconds;
  double yieldMicroseconds;
  int rank;
  int peer;
  int peerPid;                         // 0: no liveness check
  // Set once a peer behind tcp has left (said goodbye, its connection closed, and all it
  // sent before was applied: tcp_peer.hpp): it will never signal again. Null: no such check.
  const std::atomic<bool>* peerLeft;
  const ControlHeader* control;        // this rank's abort flag
  Doorbell* doorbell;                  // this rank's: sleeps end when a signal rings it
};

enum class WaitOutcome { Ready, Timeout, PeerDead, PeerLeft, Aborted };


struct NoWatch {
  void operator()() const {}
};

// Waits until ready() (spin, yield, then sleep on the rank's doorbell). Between sleeps, about
// every 50 ms, it checks the abort flag, the peer's liveness, pending signals (checkInterrupt) and
// calls watch(), which may throw: the executor uses it to notice a peer that entered this call with other arguments.
template <class Ready, class Watch = NoWatch>
WaitOutcome waitUntil(Ready&& ready, const WaitPolicy& p, Watch&& watch = Watch{}) {
  if (ready()) return WaitOutcome::Ready;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto spinEnd = start + std::chrono::nanoseconds(static_cast<int64_t>(p.spinMicroseconds * 1e3));
  // Short batches between clock reads: a pause is ~20-60 ns, so 32 keep the spin phase within a
  // couple of microseconds of FORESTCC_SPIN_US even when that is 1 us (oversubscribed nodes).
  while (true) {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return WaitOutcome::Ready;
      _mm_pause();
    }
    if (clock::now() >= spinEnd) break;
  }
  const auto yieldEnd = spinEnd + std::chrono::nanoseconds(static_cast<int64_t>(p.yieldMicroseconds * 1e3));
  // Clamped: a longer timeout (inf) would overflow the nanoseconds and expire at once.
  const auto deadline =
      start + std::chrono::nanoseconds(static_cast<int64_t>(std::min(p.timeoutSeconds, config::kMaxTimeoutSeconds) * 1e9));
  auto nextLivenessCheck = start + std::chrono::milliseconds(50);
  long sleepNs = 10000;
  while (true) {
    for (int i = 0; i < 8; ++i) {
      if (ready()) return WaitOutcome::Ready;
      _mm_pause();
    }
    auto now = clock::now();
    // What became ready before the abort (a peer's answer signalled before it poisoned) is ready.
    if (p.control && p.control->abortBy.load(std::memory_order_acquire) != 0)
      return ready() ? WaitOutcome::Ready : WaitOutcome::Aborted;
    if (now >= deadline) return ready() ? WaitOutcome::Ready : WaitOutcome::Timeout;
    if (now >= nextLivenessCheck) {
      if (p.peerPid > 0 && !processAlive(p.peerPid)) return ready() ? WaitOutcome::Ready : WaitOutcome::PeerDead;
      if (p.peerLeft && p.peerLeft->load(std::memory_order_acquire))
        return ready() ? WaitOutcome::Ready : WaitOutcome::PeerLeft;
      watch();
      checkInterrupt();
      nextLivenessCheck = now + std::chrono::milliseconds(50);
    }
    if (now < yieldEnd) {
      sched_yield();
    } else {
      sleepOnDoorbell(*p.doorbell, ready, sleepNs);
      sleepNs = sleepNs < kMaxSleepNs ? sleepNs * 2 : kMaxSleepNs;
    }
  }
}

}  // namespace forestcc
