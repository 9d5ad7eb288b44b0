// shm: a same-node peer's memory inside forestcc shared segments (forestcc.empty, scratch), mapped
// here once per segment and reached by loads and stores. The loopback connection of a rank to
// itself is one too: its own host memory is reached in place.
#pragma once

#include <map>
#include <mutex>

#include "transport/shm/node_connection.hpp"

namespace forestcc {

// Whether shm reaches memory `h` from `rank` on the node `nodeHash`: host memory of that node in a
// forestcc shared segment (MemoryHandle::shmId), or any host memory of `rank` itself (loopback).
inline bool shmReaches(const MemoryHandle& h, int rank, uint64_t nodeHash) {
  return h.kind == MemoryKind::Host && h.nodeHash == nodeHash && (h.shmId != 0 || h.ownerRank == rank);
}

class ShmConnection : public NodeConnection {
 public:
  explicit ShmConnection(NodePeer peer);
  TransportKind transport() const override { return TransportKind::Shm; }

  bool reaches(const MemoryHandle& h) const override;
  RemoteRegion attach(const MemoryHandle& h) override;
  void write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) override;
  void read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) override;
  void flush() override;

 private:
  bool loopback_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<ShmSegment>> segments_;  // by MemoryHandle::shmId
};

}  // namespace forestcc
