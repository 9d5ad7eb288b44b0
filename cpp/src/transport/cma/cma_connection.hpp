// cma: any host memory of a same-node peer process, reached with single-copy cross-process reads
// and writes (process_vm_readv/writev), so ordinary arrays need no shared allocation. Nothing is
// mapped: RemoteRegion::mapped stays null and every access goes through write()/read().
#pragma once

#include "transport/shm/node_connection.hpp"

namespace forestcc {

class CmaConnection : public NodeConnection {
 public:
  explicit CmaConnection(NodePeer peer, uint64_t nodeHash);
  TransportKind transport() const override { return TransportKind::Cma; }

  bool reaches(const MemoryHandle& h) const override;
  RemoteRegion attach(const MemoryHandle& h) override;
  void write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) override;
  void read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) override;
  void flush() override;

 private:
  uint64_t nodeHash_;  // of this node: memory of a process elsewhere is out of reach
};

}  // namespace forestcc
