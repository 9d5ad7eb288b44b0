#include "transport/shm/shm_transport.hpp"

#include <cstdio>

#include "transport/shm/shm_connection.hpp"

namespace forestcc {

bool ShmTransport::reaches(const PeerInfo& peer) const { return node_->sameNode(peer); }

bool ShmTransport::reaches(const MemoryHandle& h) const {
  return shmReaches(h, node_->self().rank, node_->self().nodeHash);
}

std::shared_ptr<void> ShmTransport::registerMemory(const void* data, uint64_t bytes, MemoryHandle& h) const {
  size_t offset = 0;
  std::shared_ptr<ShmSegment> seg = data ? findSharedAllocation(data, bytes, &offset) : nullptr;
  if (!seg) return nullptr;  // shmId stays 0: peers reach it by other transports (cma), or not at all
  h.shmOffset = offset;
  h.shmSize = seg->size();
  h.shmId = shmSegmentId(seg->name());
  std::snprintf(h.shmName, sizeof h.shmName, "%s", seg->name().c_str());
  return seg;
}

std::unique_ptr<Connection> ShmTransport::connect(const PeerInfo& peer) {
  return std::make_unique<ShmConnection>(node_->peer(peer));
}

}  // namespace forestcc
