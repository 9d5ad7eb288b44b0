#include "transport/cma/cma_transport.hpp"

// NodeBlocks and NodeConnection come with cma_connection.hpp: the one place cma builds on shm's
// folder (signals and calls go through the same-node control blocks shm maps).
#include "transport/cma/cma_connection.hpp"

namespace forestcc {

// Not this rank itself: its own memory is reached in place, by shm's loopback.
bool CmaTransport::reaches(const PeerInfo& peer) const {
  return node_->sameNode(peer) && peer.rank != node_->self().rank;
}

bool CmaTransport::reaches(const MemoryHandle& h) const {
  return cmaReaches(h, node_->self().rank, node_->self().nodeHash);
}

std::shared_ptr<void> CmaTransport::registerMemory(const void*, uint64_t, MemoryHandle& h) const {
  h.ownerPid = node_->self().pid;
  return nullptr;  // nothing to keep: the process's own memory stays while it is registered
}

std::unique_ptr<Connection> CmaTransport::connect(const PeerInfo& peer) {
  return std::make_unique<CmaConnection>(node_->peer(peer));
}

}  // namespace forestcc
