#include "transport/cma/cma_connection.hpp"

#include <atomic>

#include "transport/cma/remote_memory.hpp"

namespace forestcc {

CmaConnection::CmaConnection(NodePeer peer) : NodeConnection(std::move(peer)) {}

bool CmaConnection::reaches(const MemoryHandle& h) const {
  return h.ownerRank == peer_.peer && h.ownerPid == peer_.peerPid && cmaReaches(h, peer_.rank, peer_.nodeHash);
}

RemoteRegion CmaConnection::attach(const MemoryHandle& h) { return RemoteRegion{nullptr, h.address, h.size}; }

void CmaConnection::write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) {
  RemoteMemory::inProcess(peer_.peerPid, dst.address, dst.size, peer_.rank, peer_.peer).write(offset, src, bytes);
}

void CmaConnection::read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) {
  RemoteMemory::inProcess(peer_.peerPid, src.address, src.size, peer_.rank, peer_.peer).read(offset, dst, bytes);
}

// process_vm_writev has finished its copy when it returns.
void CmaConnection::flush() { std::atomic_thread_fence(std::memory_order_release); }

}  // namespace forestcc
