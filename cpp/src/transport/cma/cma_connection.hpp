// cma: any host memory of a same-node peer process, reached with single-copy cross-process reads
// and writes (process_vm_readv/writev), so ordinary arrays need no shared allocation. Nothing is
// mapped: RemoteRegion::mapped stays null and every access goes through write()/read().
#pragma once

#include "transport/shm/node_connection.hpp"

namespace forestcc {

// Whether cma reaches memory `h` from `rank` on the node `nodeHash`: host memory of another process
// of that node (its pid is in the handle). A rank reaches its own memory through shm's loopback.
inline bool cmaReaches(const MemoryHandle& h, int rank, uint64_t nodeHash) {
  return h.kind == MemoryKind::Host && h.nodeHash == nodeHash && h.ownerPid != 0 && h.ownerRank != rank;
}

class CmaConnection : public NodeConnection {
 public:
  explicit CmaConnection(NodePeer peer);
  TransportKind transport() const override { return TransportKind::Cma; }

  bool reaches(const MemoryHandle& h) const override;
  RemoteRegion attach(const MemoryHandle& h) override;
  void write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) override;
  void read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) override;
  void flush() override;
};

}  // namespace forestcc
