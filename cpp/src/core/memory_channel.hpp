// MemoryChannel over host memory on one node: puts and gets are copies into/out of the peer's
// memory (mapped, or by single-copy syscalls), so they are complete when they return and flush()
// has nothing to wait for. signal() is a release add on the peer's counter; wait() an acquire poll.
#pragma once

#include <memory>
#include <string>

#include "core/state.hpp"
#include "forestcc/channel.hpp"
#include "forestcc/memory.hpp"
#include "forestcc/semaphore_device.hpp"
#include "transport/remote_memory.hpp"

namespace forestcc {

class MemoryChannel : public Channel {
 public:
  MemoryChannel(std::shared_ptr<Communicator::State> comm, int peer, RegisteredMemory local, RemoteMemory remote,
                SemaphoreDeviceHandle semaphore, std::string name);

  void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) override;
  void get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) override;
  void signal() override;
  void wait(double timeoutSeconds = -1) override;
  bool test() override;
  void flush() override;

  int peer() const override { return peer_; }
  TransportKind transport() const override { return remote_.mapped ? TransportKind::Shm : TransportKind::Cma; }
  uint64_t localSize() const override { return local_.size(); }
  uint64_t remoteSize() const override { return remote_.size; }
  const std::string& name() const override { return name_; }

 private:
  void checkRange(const char* op, const char* which, uint64_t offset, uint64_t bytes, uint64_t limit,
                  const char* whose) const;
  std::shared_ptr<Communicator::State> comm_;
  int peer_;
  RegisteredMemory local_;
  RemoteMemory remote_;
  SemaphoreDeviceHandle sem_;
  std::string name_;
};

}  // namespace forestcc
