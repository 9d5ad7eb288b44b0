// What every connection between two ranks of one node shares, whatever reaches the peer's memory:
// signals and the per-call protocol go through the peer's control block (control_block.hpp),
// mapped once when the communicator is made. shm and cma connections derive from it and add only
// how they reach memory.
#pragma once

#include <memory>

#include "transport/connection.hpp"
#include "transport/shm_segment.hpp"

namespace forestcc {

// A same-node peer as its connections see it.
struct NodePeer {
  int rank = -1;        // this rank, for errors
  int peer = -1;
  int peerPid = 0;
  int localIndex = -1;  // this rank's index among the node's ranks: its row in the peer's block
  std::shared_ptr<ShmSegment> control;  // the peer's control block, mapped
};

class NodeConnection : public Connection {
 public:
  explicit NodeConnection(NodePeer peer);
  int peer() const override { return peer_.peer; }

  uint64_t* signalWord(SemaphoreSet set, int index) override;
  void signal(SemaphoreSet set, int index) override;

  uint64_t peerSequence() override;
  bool peerStamp(uint64_t sequence, CallStamp& out) override;
  bool peerEagerStamp(int bank, CallStamp& out) override;
  const MemoryHandle& peerBuffer(int buffer) override;
  const uint64_t* peerBlockOffsets(int buffer) override;
  RemoteRegion peerBank(int bank) override;

  const MemoryHandle& peerSendPost() override;
  void answerSendPost(int64_t status) override;

 protected:
  NodePeer peer_;
  ControlBlock* block_;  // the peer's
};

// The counter of `block` that signals of the rank at local index `from` land in.
uint64_t* semaphoreWord(ControlBlock& block, SemaphoreSet set, int from, int index);

}  // namespace forestcc
