// A transport: one way of reaching peers (shm, cma, tcp; cuda_ipc later), each in its own
// folder under transport/. The communicator holds one instance of each, in the order they are
// tried (Communicator::State::makeConnections, the one place that names them), and asks each:
//   reaches(peer)      can you connect to this rank at all (same node, a route, a device)?
//   registerMemory     fill your part of the handle of a local buffer, so a peer's connection of
//                      yours can reach it (what a MemoryHandle holds for each transport is decided
//                      here, in each transport's implementation, and nowhere else);
//   reaches(handle)    could a connection of yours reach the memory this peer handle describes?
//   connect(peer)      the Connection to that rank (connection.hpp).
// A peer's connections are those of every transport that reaches it, in order: the first carries
// signals and the per-call protocol, and each buffer goes through the first that reaches it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "forestcc/memory.hpp"
#include "transport/connection.hpp"

namespace forestcc {

// What the communicator's rendezvous tells every rank about each rank; transports decide from it
// whether they reach that rank, and connect with it.
struct PeerInfo {
  int rank = -1;
  std::string node;
  uint64_t nodeHash = 0;    // of `node`: handles carry it, so memory of another node is told apart
  int pid = 0;
  std::string controlName;  // its control block's segment (NodeBlocks, transport/shm/node_connection.hpp)
  std::string tcpAddress;   // "host:port" its tcp transport listens on (transport/tcp/)
  std::string transports;   // its FORESTCC_TRANSPORT: every rank must choose the same way
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportKind kind() const = 0;
  const char* name() const { return transportName(kind()); }

  // Whether this transport can connect this rank to `peer` (this rank itself included: loopback).
  virtual bool reaches(const PeerInfo& peer) const = 0;
  // Whether a connection of this transport to the owner of `h` could reach the memory it describes.
  virtual bool reaches(const MemoryHandle& h) const = 0;
  // Fills this transport's fields of `h` for local memory [data, data + bytes) (the communicator
  // has filled the common ones: kind, owner rank, node, address, size). Returns what must stay
  // alive while peers may reach the memory through the handle (null when nothing).
  virtual std::shared_ptr<void> registerMemory(const void* data, uint64_t bytes, MemoryHandle& h) const = 0;
  // The connection to `peer` (reaches(peer) is true). Called once per peer, when the
  // communicator is made.
  virtual std::unique_ptr<Connection> connect(const PeerInfo& peer) = 0;
  // Every connection of the communicator is made (a proxied transport starts its thread here).
  virtual void connected() {}
};

}  // namespace forestcc
