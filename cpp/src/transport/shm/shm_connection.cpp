#include "transport/shm/shm_connection.hpp"

#include <atomic>
#include <cstring>

namespace forestcc {

ShmConnection::ShmConnection(NodePeer peer) : NodeConnection(std::move(peer)), loopback_(peer_.peer == peer_.rank) {}

bool ShmConnection::reaches(const MemoryHandle& h) const {
  return h.ownerRank == peer_.peer && shmReaches(h, peer_.rank, peer_.nodeHash);
}

RemoteRegion ShmConnection::attach(const MemoryHandle& h) {
  if (loopback_) return RemoteRegion{reinterpret_cast<char*>(h.address), h.address, h.size};
  if (h.size == 0) return RemoteRegion{nullptr, h.address, 0};  // nothing to map; no copy touches it
  std::lock_guard<std::mutex> g(mu_);
  auto it = segments_.find(h.shmId);
  if (it == segments_.end()) {
    // A new segment: first let go of those whose owners released them (unlinked names are never
    // handed out again), or every buffer a peer ever allocated would stay mapped, and resident.
    for (auto old = segments_.begin(); old != segments_.end();)
      old = old->second->linked() ? std::next(old) : segments_.erase(old);
    it = segments_.emplace(h.shmId, ShmSegment::open(h.shmName, h.shmSize, peer_.rank, peer_.peer)).first;
  }
  return RemoteRegion{static_cast<char*>(it->second->data()) + h.shmOffset, h.address, h.size};
}

void ShmConnection::write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (bytes) std::memcpy(dst.mapped + offset, src, bytes);
}

void ShmConnection::read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) {
  if (bytes) std::memcpy(dst, src.mapped + offset, bytes);
}

// Copies are complete on return; the fence keeps the contract for a caller that flushes before a
// flag of its own.
void ShmConnection::flush() { std::atomic_thread_fence(std::memory_order_release); }

}  // namespace forestcc
