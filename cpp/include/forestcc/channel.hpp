// Channels: the one-sided primitives every algorithm is written with.
//   put(dst, src, bytes)  copy local [src, src+bytes) into the peer's registered memory at dst
//   get(dst, src, bytes)  copy the peer's [src, src+bytes) into local memory at dst
//   signal()              tell the peer that everything put so far on this channel is visible
//   wait()                block until the peer's next signal (deadline: FORESTCC_TIMEOUT)
//   flush()               block until this channel's outstanding puts have completed
// A MemoryChannel (shared memory, later CUDA IPC) copies directly; a PortChannel (TCP, later)
// hands requests to a proxy thread. Callers see the same interface either way.
#pragma once

#include <cstdint>
#include <string>

#include "forestcc/memory.hpp"  // TransportKind

namespace forestcc {

class Channel {
 public:
  virtual ~Channel() = default;
  virtual void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) = 0;
  virtual void get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) = 0;
  virtual void signal() = 0;
  // timeoutSeconds < 0: the communicator's timeout, whose expiry poisons the communicator as any
  // wait's does; >= 0 (at most config::kMaxTimeoutSeconds): the caller's, whose expiry throws
  // Timeout and leaves the channel usable (the next wait waits for the same signal).
  virtual void wait(double timeoutSeconds = -1) = 0;
  // True (consuming the signal) if the peer's next signal has already arrived; never blocks.
  virtual bool test() = 0;
  virtual void flush() = 0;
  void putWithSignal(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    put(dstOffset, srcOffset, bytes);
    signal();
  }

  virtual int peer() const = 0;
  virtual TransportKind transport() const = 0;
  virtual uint64_t localSize() const = 0;
  virtual uint64_t remoteSize() const = 0;
  virtual const std::string& name() const = 0;  // "rank 0 -> rank 1, tag 7" for errors
};

}  // namespace forestcc
