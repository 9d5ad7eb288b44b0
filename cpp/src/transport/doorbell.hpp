// Ringing and sleeping on a rank's doorbell (control_block.hpp): a process-shared futex in the
// control block. The doorbell only shortens sleeps: a sleeper never sleeps longer than the
// timeout it passes, so an event that does not ring (a GPU runner publishing its buffers) is still
// seen within that timeout, as it was before doorbells.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>

#include "transport/control_block.hpp"

namespace forestcc {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "a futex word must be a plain 32-bit integer");

// Called after the signal's store. The fence pairs with the sleeper's: either the sleeper's
// recheck sees the signal, or this sees the sleeper and wakes it.
inline void ringDoorbell(Doorbell& d) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (d.sleepers.load(std::memory_order_relaxed) == 0) return;
  d.rings.fetch_add(1, std::memory_order_relaxed);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d.rings), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// A signal into a counter this process maps: the release add (after every write before it),
// then the ring. Every mapped signal goes through here, so none forgets the doorbell.
inline void signalMapped(uint64_t* word, Doorbell& d) {
  __atomic_fetch_add(word, 1, __ATOMIC_RELEASE);
  ringDoorbell(d);
}

// Sleeps up to `ns` nanoseconds unless ready() holds or the doorbell rings (or has rung since
// this call began). Spurious returns are fine: callers loop.
template <class Ready>
void sleepOnDoorbell(Doorbell& d, Ready&& ready, long ns) {
  d.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = d.rings.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!ready()) {
    timespec ts{ns / 1000000000L, ns % 1000000000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d.rings), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  d.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace forestcc
