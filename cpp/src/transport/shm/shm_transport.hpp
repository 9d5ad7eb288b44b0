// shm as a Transport: reaches every rank of this node (itself too: loopback); a handle's shm part
// is the forestcc shared segment its memory lies in (name, size, offset, id), which peers map.
#pragma once

#include <memory>

#include "transport/shm/node_connection.hpp"
#include "transport/transport.hpp"

namespace forestcc {

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(std::shared_ptr<NodeBlocks> node) : node_(std::move(node)) {}
  TransportKind kind() const override { return TransportKind::Shm; }

  bool reaches(const PeerInfo& peer) const override;
  bool reaches(const MemoryHandle& h) const override;
  std::shared_ptr<void> registerMemory(const void* data, uint64_t bytes, MemoryHandle& h) const override;
  std::unique_ptr<Connection> connect(const PeerInfo& peer) override;

 private:
  std::shared_ptr<NodeBlocks> node_;  // shared with cma
};

}  // namespace forestcc
