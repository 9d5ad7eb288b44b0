// The communicator's shared state, held by the communicator and by every channel it made (a
// channel outliving its Python communicator object must not dangle).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/wait.hpp"
#include "forestcc/bootstrap.hpp"
#include "forestcc/communicator.hpp"
#include "transport/connection.hpp"
#include "transport/control_block.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/transport.hpp"

namespace forestcc {

namespace tcp {
class TcpTransport;
}

struct Communicator::State {
  // Tells same-node peers this rank left (ControlHeader::left) before anything goes.
  ~State();

  std::unique_ptr<Bootstrap> bootstrap;
  int rank = 0;
  int size = 1;
  double timeout = 300;
  double spinUs = 50;
  double yieldUs = 20;
  std::vector<PeerInfo> peers;  // every rank's, from the rendezvous (transport.hpp)
  std::vector<int> nodeOf;
  std::vector<int> localRanks;
  int localRank = 0;
  int nodeCount = 1;

  std::shared_ptr<ShmSegment> controlSegment;
  ControlBlock* control = nullptr;
  std::mutex mu;                                       // guards what follows
  int nextSlot = 0;

  // The transports, in the order they are tried (makeConnections names them), and each peer's
  // connections: one per transport that reaches it, in that order; empty for a peer no transport
  // of this build reaches (another node). Made when the communicator is constructed, never
  // changed after. Connections are declared last: they go before the transports that made them.
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<std::vector<std::unique_ptr<Connection>>> connections;

  // The connection that reaches memory `h` of `peer` (the first transport, in order, that can).
  Connection& connection(int peer, const MemoryHandle& h);
  // The connection that carries signals and the per-call protocol to `peer`.
  Connection& link(int peer);
  CallMailbox& mailbox() { return control->mailbox; }  // this rank's own (peers read it through link())
  uint64_t* inboundWord(SemaphoreSet set, int peer, int index);  // this rank's counter that peer's signals land in
  void published();                                      // calls link(p).callPublished(mailbox()) for every peer
  char* bank(int b) { return control->scratchBanks.bank[b]; }  // this rank's eager scratch bank b
  // A local buffer as a handle peers can attach: the common fields, then each transport's
  // (Transport::registerMemory). `keepAlive`, when given, receives what must outlive the handle.
  MemoryHandle describe(const void* data, uint64_t bytes, std::shared_ptr<void>* keepAlive = nullptr);
  int localIndex(int rank) const;  // among this node's ranks; -1 elsewhere
  std::unique_ptr<tcp::TcpTransport> makeTcp();  // before the rendezvous: its address is part of PeerInfo
  void makeConnections(std::unique_ptr<Transport> tcp);  // at construction, after peers and localRanks are known

  int allocateSlot();
  WaitPolicy waitPolicy(int peer, double timeoutSeconds) const;
  // Set once `peer` has left (Connection::peerLeftFlag of its link); null where its link cannot tell.
  const std::atomic<bool>* leftFlag(int peer) const;
  // Poison here and on every connected peer (first poisoner wins); `code` is the kind of the error
  // that did it, so waiters woken by a mismatch raise a mismatch too.
  void poison(const std::string& reason, ErrorCode code = ErrorCode::Aborted, uint64_t call = 0);
  uint64_t poisonedCall() const;  // the collective call the poison came from (0: none)
  bool poisoned() const;
  int poisonedBy() const;  // the rank that poisoned it (-1: healthy)
  ErrorCode poisonedCode() const;  // Mismatch when a mismatch poisoned it, else Aborted
  std::string abortReason() const;
  // After a call that failed once this rank published its buffers, before the caller may free
  // them: waits until no same-node peer holds them (Connection::holdBuffers; a holder sees the
  // poison at its next wait, or finishes its write), bounded by the timeout and the holder's
  // death. Call it poisoned: a holder counted after this returns sees the poison and writes nothing.
  void awaitBufferHolders() const noexcept;
  // Throws the error a waiter woken by the poison raises: "<what> aborted: ... <reason>".
  [[noreturn]] void raisePoisoned(const std::string& what, int peer);
  [[noreturn]] void raiseWaitFailure(WaitOutcome outcome, int peer, const std::string& what, double timeoutSeconds);
};

}  // namespace forestcc
