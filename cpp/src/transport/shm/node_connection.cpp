#include "transport/shm/node_connection.hpp"

#include "transport/doorbell.hpp"
#include "transport/stamp_seqlock.hpp"

namespace forestcc {

uint64_t* semaphoreWord(ControlBlock& block, SemaphoreSet set, int from, int index) {
  switch (set) {
    case SemaphoreSet::Channel: return &block.slots[index].value;
    case SemaphoreSet::Plan: return &block.planSlots[from][index].value;
    case SemaphoreSet::SendReady: return &block.sendReady[from].value;
    case SemaphoreSet::RecvDone: return &block.recvDone[from].value;
  }
  return nullptr;
}

NodeBlocks::NodeBlocks(PeerInfo self, std::vector<int> localRanks, std::shared_ptr<ShmSegment> own)
    : self_(std::move(self)), localRanks_(std::move(localRanks)) {
  blocks_[self_.rank] = std::move(own);
}

int NodeBlocks::localIndexOf(int rank) const {
  for (size_t i = 0; i < localRanks_.size(); ++i)
    if (localRanks_[i] == rank) return static_cast<int>(i);
  return -1;
}

NodePeer NodeBlocks::peer(const PeerInfo& peer) {
  NodePeer np;
  np.rank = self_.rank;
  np.peer = peer.rank;
  np.peerPid = peer.pid;
  np.localIndex = localIndexOf(self_.rank);
  np.peerLocalIndex = localIndexOf(peer.rank);
  np.nodeHash = self_.nodeHash;
  std::lock_guard<std::mutex> g(mu_);
  auto it = blocks_.find(peer.rank);
  if (it == blocks_.end())
    it = blocks_.emplace(peer.rank, ShmSegment::open(peer.controlName, sizeof(ControlBlock), self_.rank, peer.rank))
             .first;
  np.control = it->second;
  np.own = static_cast<ControlBlock*>(blocks_[self_.rank]->data());
  return np;
}

NodeConnection::NodeConnection(NodePeer peer)
    : peer_(std::move(peer)), block_(static_cast<ControlBlock*>(peer_.control->data())) {}

uint64_t* NodeConnection::signalWord(SemaphoreSet set, int index) {
  return semaphoreWord(*block_, set, peer_.localIndex, index);
}

void NodeConnection::signal(SemaphoreSet set, int index) {
  // Writes on shm and cma connections are complete when they return; the release orders them
  // before the flag.
  signalMapped(signalWord(set, index), block_->doorbell);
}

uint64_t* NodeConnection::inboundWord(SemaphoreSet set, int index) {
  return semaphoreWord(*peer_.own, set, peer_.peerLocalIndex, index);
}

uint64_t NodeConnection::peerSequence() { return __atomic_load_n(&block_->mailbox.sequence, __ATOMIC_ACQUIRE); }

bool NodeConnection::peerStamp(uint64_t sequence, CallStamp& out) {
  return readStamp(block_->mailbox.byCall[sequence % kStampHistory], out);
}

bool NodeConnection::peerEagerStamp(int bank, CallStamp& out) {
  return readStamp(block_->mailbox.byEagerCall[bank], out);
}

const MemoryHandle& NodeConnection::peerBuffer(int buffer) { return block_->mailbox.handles[buffer]; }

const uint64_t* NodeConnection::peerBlockOffsets(int buffer) { return block_->mailbox.blockOffsets[buffer]; }

const DeviceMailbox* NodeConnection::peerDeviceMailbox() { return &block_->deviceMailbox; }

RemoteRegion NodeConnection::peerBank(int bank) {
  return RemoteRegion{block_->scratchBanks.bank[bank], 0, kScratchBankBytes};
}

// The peer reads this rank's post in this rank's block, at its own local index.
void NodeConnection::postSend(const MemoryHandle& buffer) {
  SendPost& post = peer_.own->mailbox.sendPosts[peer_.peerLocalIndex];
  post.buffer = buffer;
  post.status = 0;
}

int64_t NodeConnection::sendStatus() {
  return __atomic_load_n(&peer_.own->mailbox.sendPosts[peer_.peerLocalIndex].status, __ATOMIC_ACQUIRE);
}

const MemoryHandle& NodeConnection::peerSendPost() { return block_->mailbox.sendPosts[peer_.localIndex].buffer; }

void NodeConnection::answerSendPost(int64_t status) {
  // Published by the RecvDone signal that follows (a release).
  __atomic_store_n(&block_->mailbox.sendPosts[peer_.localIndex].status, status, __ATOMIC_RELAXED);
}

void NodeConnection::abort(const std::string& reason, ErrorCode code, uint64_t call) {
  storeAbort(block_->header, peer_.rank, reason, code, call);
}

// Against the peer's exit (poison its own block, a full fence, then read the holds:
// awaitBufferHolders): the fence here orders this hold before the look at its poison, so either
// the peer sees the hold, or this rank sees its poison. Plain stores otherwise (one line that
// only this rank writes): a few nanoseconds per call and peer.
bool NodeConnection::holdBuffers(uint64_t call) {
  BufferHold& hold = block_->bufferHolds[peer_.localIndex];
  __atomic_store_n(&hold.held, call, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (block_->header.abortBy.load(std::memory_order_relaxed) == 0) return true;
  releaseBuffers(call);
  return false;
}

void NodeConnection::releaseBuffers(uint64_t call) {
  // Release: every write this rank made into the buffers happens before the peer reads it.
  __atomic_store_n(&block_->bufferHolds[peer_.localIndex].released, call, __ATOMIC_RELEASE);
}

}  // namespace forestcc
