// cma as a Transport: reaches the other ranks of this node; a handle's cma part is its owner's pid
// (the address is common to every transport), for process_vm_readv/writev.
#pragma once

#include <memory>

#include "transport/transport.hpp"

namespace forestcc {

class NodeBlocks;  // transport/shm/node_connection.hpp

class CmaTransport : public Transport {
 public:
  explicit CmaTransport(std::shared_ptr<NodeBlocks> node) : node_(std::move(node)) {}
  TransportKind kind() const override { return TransportKind::Cma; }

  bool reaches(const PeerInfo& peer) const override;
  bool reaches(const MemoryHandle& h) const override;
  std::shared_ptr<void> registerMemory(const void* data, uint64_t bytes, MemoryHandle& h) const override;
  std::unique_ptr<Connection> connect(const PeerInfo& peer) override;

 private:
  std::shared_ptr<NodeBlocks> node_;  // shared with shm: signals and calls go through the same blocks
};

}  // namespace forestcc
