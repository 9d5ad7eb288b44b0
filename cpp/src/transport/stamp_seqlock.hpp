// Call stamps (control_block.hpp) are written by their owner and read by peers as a seqlock: a
// reader that raced with the owner rewriting the slot (the owner being calls further) sees the
// sequence change and does not trust what it read. Used by the executor (writes its own mailbox)
// and by the connections that read a peer's (transport/).
#pragma once

#include <atomic>
#include <cstring>

#include "transport/control_block.hpp"

namespace forestcc {

inline void writeStamp(CallStamp& slot, const CallStamp& stamp) {
  __atomic_store_n(&slot.sequence, 0, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(reinterpret_cast<char*>(&slot) + sizeof slot.sequence,
              reinterpret_cast<const char*>(&stamp) + sizeof stamp.sequence, sizeof stamp - sizeof stamp.sequence);
  __atomic_store_n(&slot.sequence, stamp.sequence, __ATOMIC_RELEASE);
}

// False when the slot changed while being read. Sequence 0: never written (or being rewritten,
// which a reader cannot tell apart: either way not this call's stamp).
inline bool readStamp(const CallStamp& slot, CallStamp& out) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t before = __atomic_load_n(&slot.sequence, __ATOMIC_ACQUIRE);
    std::memcpy(static_cast<void*>(&out), &slot, sizeof out);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t after = __atomic_load_n(&slot.sequence, __ATOMIC_RELAXED);
    out.sequence = before;
    if (before == after) return true;
  }
  return false;
}

}  // namespace forestcc
