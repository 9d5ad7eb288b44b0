// Semaphore operations on plain data, usable from host code and from CUDA device code.
// A semaphore is a pair of monotonic 64-bit counters: signal() adds 1 (release) to the peer's
// inbound counter; wait() raises a private expected count and polls (acquire) until the inbound
// counter reaches it. Counters are never reset, so a late or repeated signal is never lost.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FORESTCC_HOST_DEVICE __host__ __device__
#else
#define FORESTCC_HOST_DEVICE
#endif

namespace forestcc {

struct SemaphoreDeviceHandle {
  uint64_t* inbound;   // written by the peer, read here
  uint64_t* outbound;  // the peer's inbound counter
  uint64_t expected;   // signals consumed so far

  FORESTCC_HOST_DEVICE void signal() {
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    atomicAdd(reinterpret_cast<unsigned long long*>(outbound), 1ull);
#else
    __atomic_fetch_add(outbound, 1, __ATOMIC_RELEASE);
#endif
  }

  FORESTCC_HOST_DEVICE uint64_t inboundValue() const {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<volatile uint64_t*>(inbound);
#else
    return __atomic_load_n(inbound, __ATOMIC_ACQUIRE);
#endif
  }

  // One poll: true (and the signal consumed) when the next expected signal has arrived.
  FORESTCC_HOST_DEVICE bool tryWait() {
    if (inboundValue() >= expected + 1) {
      ++expected;
      return true;
    }
    return false;
  }
};

}  // namespace forestcc
