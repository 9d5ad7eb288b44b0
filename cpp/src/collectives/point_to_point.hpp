// Point-to-point messages of one communicator: batches of sends and receives whose exchanges with
// every peer progress at once (a single send or receive is a batch of one).
//
// The protocol, per direction (this rank -> peer), one batch at a time:
//   sender    writes a manifest (how many messages, and a MemoryHandle for each) into shared
//             memory of its own, posts the manifest's handle (Connection::postSend) and signals
//             SendReady;
//   receiver  on SendReady reads the manifest, compares it with its own receives from that peer
//             (count, then each size), reads every message straight from the sender's buffer
//             (mapped shm, a cma copy or a tcp get), answers with a status and signals RecvDone;
//   sender    on RecvDone reads the status: received, failed to copy, or what did not match.
// One rendezvous per peer and batch, however many messages it carries: a group of NCCL sends and
// receives costs what its slowest peer costs, not the sum of its pairs. The sender posts every
// manifest before it waits for anything and the receiver serves whichever peer is ready first, so
// no pattern of peers can deadlock. A mismatch is found by both sides of the direction, from the
// one manifest and the one status, so both raise InvalidUsage and the pair stays in step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/memory.hpp"

namespace forestcc::collectives {

class PointToPoint {
 public:
  explicit PointToPoint(std::shared_ptr<Communicator::State> state);

  // Runs a batch on this thread until every message is received; throws the first failure after
  // every other direction of the batch has finished (so peers are not left waiting) or, for a
  // wait that failed (timeout, dead peer, poison), at once. A batch with sends may not run
  // concurrently with another batch with sends, nor one with receives with another with receives
  // (the engine orders them); a send-only and a receive-only batch may.
  void run(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs);

 private:
  char* manifestSpace(size_t bytes);

  std::shared_ptr<Communicator::State> state_;
  std::vector<uint64_t> sendsDone_, sendsReady_;  // SendReady / RecvDone signals consumed, by peer
  // Where this rank's manifests live: shared memory, so a same-node receiver reads them with a
  // plain copy. Grown, never shrunk; touched only by batches with sends.
  std::unique_ptr<SharedAllocation> manifests_;
  std::vector<char> manifestIn_;  // a peer's manifest, read here; touched only by batches with receives
};

}  // namespace forestcc::collectives
