// The communicator: the ranks of a job, which of them share a node, their control blocks
// (semaphores, abort flag), memory registration and channel creation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "forestcc/channel.hpp"
#include "forestcc/memory.hpp"

namespace forestcc {

class Communicator {
 public:
  // Collective over the bootstrap's ranks: exchanges node identities and control blocks.
  explicit Communicator(std::unique_ptr<Bootstrap> bootstrap);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  int localRank() const;                 // index among the ranks of this node
  int localSize() const;
  int nodeCount() const;
  int nodeOf(int rank) const;            // nodes numbered by first appearance in rank order
  const std::vector<int>& localRanks() const;
  const std::string& nodeName(int rank) const;
  double timeoutSeconds() const;
  double spinMicroseconds() const;  // how long a wait busy-polls (FORESTCC_SPIN_US, auto resolved)
  double yieldMicroseconds() const;  // how long it then yields before it sleeps (FORESTCC_YIELD_US)
  Bootstrap& bootstrap();

  // Registers [data, data+size) for channels. Host memory inside a forestcc shared allocation is
  // mapped by peers; any other host memory is reached by single-copy cross-process access.
  RegisteredMemory registerMemory(void* data, size_t size, MemoryKind kind = MemoryKind::Host);

  // Pairwise and collective between this rank and `peer` (both call it with the same tag):
  // exchanges registrations and semaphores and returns a channel that puts into the peer's
  // registered memory and gets from it. The transport is the first that can connect the two:
  // CUDA IPC for GPU memory, shared memory on one node, TCP otherwise.
  std::shared_ptr<Channel> connect(int peer, const RegisteredMemory& local, uint64_t tag = 0);
  // Several peers at once: all handshakes are sent before any is awaited, so ranks may connect
  // to each other in any order (connecting one peer at a time around a ring would deadlock).
  std::vector<std::shared_ptr<Channel>> connect(const std::vector<int>& peers, const RegisteredMemory& local,
                                                uint64_t tag = 0);

  // Poisons the communicator here and on every same-node peer: their waits fail with `reason`.
  void abort(const std::string& reason);
  // Throws Aborted if this communicator was poisoned (here or by a peer).
  void checkHealthy() const;
  // Whether `rank` has left: it said goodbye (destroyed its communicator, or its process ended)
  // and closed its connection. Known for peers behind tcp (its goodbye) and on this node (it
  // destroyed its communicator; one whose process ended counts as dead, not left).
  bool peerLeft(int rank) const;

  struct State;
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<Channel> makeMemoryChannel(int peer, const RegisteredMemory& local, const MemoryHandle& remote,
                                             int slot, int remoteSlot, uint64_t tag);
  std::shared_ptr<State> state_;
};

}  // namespace forestcc
