// What every connection between two ranks of one node shares, whatever reaches the peer's memory:
// signals and the per-call protocol go through the peer's control block (control_block.hpp),
// mapped once when the communicator is made. shm and cma connections derive from it and add only
// how they reach memory.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/connection.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace forestcc {

// A same-node peer as its connections see it.
struct NodePeer {
  int rank = -1;        // this rank, for errors
  int peer = -1;
  int peerPid = 0;
  int localIndex = -1;  // this rank's index among the node's ranks: its row in the peer's block
  int peerLocalIndex = -1;  // the peer's: its row in this rank's block
  uint64_t nodeHash = 0;  // of this node (MemoryHandle::nodeHash)
  std::shared_ptr<ShmSegment> control;  // the peer's control block, mapped
  ControlBlock* own = nullptr;          // this rank's
};

// The control blocks of this node's ranks as this rank reaches them: its own, and each peer's,
// mapped once (by the first of that peer's connections) and shared by its shm and cma
// connections. The shm and cma transports hold one between them.
class NodeBlocks {
 public:
  // `self`: this rank; `localRanks`: the node's ranks in order (this one's index in it is its
  // local index); `own`: its control block.
  NodeBlocks(PeerInfo self, std::vector<int> localRanks, std::shared_ptr<ShmSegment> own);
  const PeerInfo& self() const { return self_; }
  bool sameNode(const PeerInfo& peer) const { return peer.node == self_.node; }
  // `peer` (on this node) as its connections see it; maps its control block the first time.
  NodePeer peer(const PeerInfo& peer);

 private:
  int localIndexOf(int rank) const;

  PeerInfo self_;
  std::vector<int> localRanks_;
  std::mutex mu_;
  std::map<int, std::shared_ptr<ShmSegment>> blocks_;  // by rank, this rank's own included
};

class NodeConnection : public Connection {
 public:
  explicit NodeConnection(NodePeer peer);
  int peer() const override { return peer_.peer; }

  uint64_t* signalWord(SemaphoreSet set, int index) override;
  Doorbell* peerDoorbell() override { return &block_->doorbell; }
  void signal(SemaphoreSet set, int index) override;
  uint64_t* inboundWord(SemaphoreSet set, int index) override;

  uint64_t peerSequence() override;
  bool peerStamp(uint64_t sequence, CallStamp& out) override;
  bool peerEagerStamp(int bank, CallStamp& out) override;
  const MemoryHandle& peerBuffer(int buffer) override;
  const uint64_t* peerBlockOffsets(int buffer) override;
  const DeviceMailbox* peerDeviceMailbox() override;
  RemoteRegion peerBank(int bank) override;

  void postSend(const MemoryHandle& buffer) override;
  int64_t sendStatus() override;
  const MemoryHandle& peerSendPost() override;
  void answerSendPost(int64_t status) override;

  void abort(const std::string& reason, ErrorCode code, uint64_t call) override;
  const std::atomic<bool>* peerLeftFlag() const override { return &block_->header.left; }
  bool holdBuffers(uint64_t call) override;
  void releaseBuffers(uint64_t call) override;

 protected:
  NodePeer peer_;
  ControlBlock* block_;  // the peer's
};

// The counter of `block` that signals of the rank at local index `from` land in.
uint64_t* semaphoreWord(ControlBlock& block, SemaphoreSet set, int from, int index);

}  // namespace forestcc
