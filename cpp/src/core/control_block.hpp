// Per-rank control block in shared memory: inbound semaphore counters (one 64-byte line each, so
// two counters never share a cache line) and the communicator's abort flag, which any rank on the
// node may set to wake every waiter here with an error.
#pragma once

#include <atomic>
#include <cstdint>

namespace forestcc {

struct alignas(64) SemaphoreSlot {
  uint64_t value;  // accessed with __atomic builtins (shared with SemaphoreDeviceHandle)
};

struct alignas(64) ControlHeader {
  uint64_t magic;
  std::atomic<uint32_t> abortBy;   // 0 healthy; otherwise 1 + the rank that poisoned it
  std::atomic<uint32_t> messageReady;
  char abortMessage[512];
};

constexpr uint64_t kControlMagic = 0x4c52544343434f46ull;  // "FOCCCTRL"
constexpr int kSemaphoreSlots = 4096;

struct ControlBlock {
  ControlHeader header;
  SemaphoreSlot slots[kSemaphoreSlots];
};

}  // namespace forestcc
