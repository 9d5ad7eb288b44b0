// The channel of Communicator::connect(): puts and gets go through the connection that reaches
// the peer's registered memory (State::connection: shm maps it, cma copies across processes), and
// signals land on the peer's Channel semaphore through that same connection, so they are ordered
// after its writes. wait() polls this rank's own inbound counter.
#pragma once

#include <memory>
#include <string>

#include "core/state.hpp"
#include "forestcc/channel.hpp"
#include "forestcc/memory.hpp"
#include "transport/connection.hpp"

namespace forestcc {

class MemoryChannel : public Channel {
 public:
  // `inbound`: this rank's counter the peer signals; `remoteSlot`: the peer's that we signal.
  MemoryChannel(std::shared_ptr<Communicator::State> comm, int peer, RegisteredMemory local, Connection& connection,
                RemoteRegion remote, uint64_t* inbound, int remoteSlot, std::string name);

  void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) override;
  void get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) override;
  void signal() override;
  void wait(double timeoutSeconds = -1) override;
  bool test() override;
  void flush() override;

  int peer() const override { return peer_; }
  TransportKind transport() const override { return connection_.transport(); }
  uint64_t localSize() const override { return local_.size(); }
  uint64_t remoteSize() const override { return remote_.size; }
  const std::string& name() const override { return name_; }

 private:
  void checkRange(const char* op, const char* which, uint64_t offset, uint64_t bytes, uint64_t limit,
                  const char* whose) const;
  std::shared_ptr<Communicator::State> comm_;
  int peer_;
  RegisteredMemory local_;
  Connection& connection_;  // owned by comm_
  RemoteRegion remote_;
  uint64_t* inbound_;
  uint64_t expected_ = 0;  // signals consumed so far
  int remoteSlot_;
  std::string name_;
};

}  // namespace forestcc
