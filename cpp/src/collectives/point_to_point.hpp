// Point-to-point messages of one communicator: batches of sends and receives whose exchanges with
// every peer progress at once (a single send or receive is a batch of one).
//
// The protocol, per direction (this rank -> peer), one sender's batch at a time:
//   sender    writes a manifest (how many messages, and a MemoryHandle for each) into shared
//             memory of its own (a small host message is copied there too, and its handle names
//             the copy: point_to_point.cpp, kInlineMessageBytes), posts the manifest's handle
//             (Connection::postSend) and signals SendReady;
//   receiver  on SendReady reads the manifest, compares each message with its own next receive
//             from that peer (size, memory kind), reads it where its handle says (mapped shm, a
//             cma copy from the sender's buffer or a tcp get), and once every message of the
//             manifest is received answers with a status and signals RecvDone;
//   sender    on RecvDone reads the status: received, failed to copy, or what did not match.
// Messages match in order per direction, not batch to batch (as NCCL matches across groups): a
// receiver's batch that wants fewer messages than the manifest holds leaves the rest to its next
// batch with receives from that peer (the sender waits for the answer until then), one that wants
// more waits for the sender's next manifest. One rendezvous per peer and batch, however many
// messages it carries: a group of NCCL sends and receives costs what its slowest peer costs, not
// the sum of its pairs. The sender posts every manifest before it waits for anything and the
// receiver serves whichever peer is ready first, so no pattern of peers can deadlock within one
// batch each (across batches a sender's batch waits for the receiver's later ones, as NCCL's
// groups do). A mismatch is found by both sides of the direction, from the one manifest and the
// one status: both raise InvalidUsage and the rest of that manifest and of the receiver's batch
// from that peer is not delivered; the pair stays in step when the two were one to one, else the
// receiver poisons the communicator (the pair could no longer match its messages). A batch one
// side refused for its arguments still takes its place (refuse): a refused send posts a manifest
// marked refused, whose messages fail the receives they meet; a refused receive takes the
// sender's messages and answers that it refused them; the pair stays in step and both sides
// of each message raise.
//
// GPU memory (docs/gpu.md, "Send and receive"), same node, through CUDA IPC, enqueued on the
// caller's stream; the host rendezvous above is unchanged, the manifest carries two events:
//   sender    records its batch event on its stream (before anything of the batch waits there)
//             and puts the event's handle in every manifest, each GPU message as the IPC handle
//             of its allocation;
//   receiver  makes its stream wait for the sender's event, enqueues each copy from the mapped
//             send buffer, records its own event of the direction after them and writes that
//             event's handle into the sender's manifest before it signals RecvDone (a manifest
//             received over several batches: each later batch's stream first waits for the
//             completion of the batch before it, so the event covers every copy);
//   sender    on RecvDone makes its stream wait for the receiver's event, so later work on the
//             sender's stream (a write into the send buffer) runs after the copy read it.
// Every wait a stream is given is for a record enqueued before, in real time, so streams never
// wait for each other in a cycle. An event is recorded again only after every peer that waits for
// it has called its wait (CUDA waits for the record that was latest then): the batch event in the
// next batch with sends, which starts after every receiver answered; a receive event when the
// same sender's next manifest is served, which it posts after it called its wait.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/memory.hpp"
#include "transport/cuda_ipc/ipc_event.hpp"

namespace forestcc::collectives {

// The completion of a batch on GPU memory: an event recorded on its stream after it.
struct DeviceCompletion {
  std::unique_ptr<cuda_ipc::SharedEvent> event;
  std::vector<int> peers;  // the batch's peers on other processes: a wait for it watches them
};

class PointToPoint {
 public:
  explicit PointToPoint(std::shared_ptr<Communicator::State> state);
  ~PointToPoint();

  // Runs a batch on this thread until every message is received; throws the first failure after
  // every other direction of the batch has finished (so peers are not left waiting) or, for a
  // wait that failed (timeout, dead peer, poison), at once. A batch with sends may not run
  // concurrently with another batch with sends, nor one with receives with another with receives
  // (the engine orders them); a send-only and a receive-only batch may.
  //
  // GPU messages are enqueued on `stream`; returns then the batch's completion (an event recorded
  // on the stream after it), else null.
  // `sendEvent`: the batch event of a queued batch, recorded when it was called (recordAtCall);
  // null: recorded here.
  //
  // A batch refused before any peer was told of it (a GPU message without CUDA, a buffer that
  // cannot be shared, ...) is run as refused (refuse) before its error is raised.
  std::shared_ptr<DeviceCompletion> run(const std::vector<SendMessage>& sends,
                                             const std::vector<RecvMessage>& recvs, void* stream = nullptr,
                                             const cuda_ipc::SharedEvent* sendEvent = nullptr);
  // A batch this rank refused for its arguments: each message (its peer is all that counts; one
  // to this rank itself or to no rank is left out) still takes its place in its direction's order,
  // marked refused, so the message it would have matched on the peer fails there (MismatchError,
  // "rank 0 refused its send ...") instead of matching this rank's next one. Waits as the batch
  // would have (until each peer reached the match); never throws (a wait that fails poisons the
  // communicator, as in any batch). schedules/README.md, "Refused calls".
  void refuse(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs) noexcept;
  // A queued batch with GPU sends records its batch event on the stream when it is called, so
  // the data it sends is what the stream holds at that point of the program (later work on the
  // stream is not waited for: that could make streams wait in a cycle). Null when the batch
  // sends no GPU bytes. Raises what run would refuse before telling peers (GPU memory without
  // CUDA, on two devices, to another node, on a captured stream).
  std::shared_ptr<cuda_ipc::SharedEvent> recordAtCall(const std::vector<SendMessage>& sends,
                                                      const std::vector<RecvMessage>& recvs, void* stream);
  // Blocks until the GPU reached `done` (a completion run returned; null: at once), with the
  // communicator's deadline and poison; with block false only polls.
  static bool awaitCompletion(Communicator::State& s, const std::shared_ptr<DeviceCompletion>& done,
                              bool block);
  // A queued batch on GPU memory (its Work, which finishes when the batch ran on the host), so
  // that synchronize() waits for it too.
  void track(std::shared_ptr<Work> queued);
  // Blocks until every tracked batch ran and every batch enqueued on the GPU finished there;
  // raises the first error one hit. Queued batches on host memory only are not waited for.
  void synchronize();

 private:
  std::shared_ptr<DeviceCompletion> exchange(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs,
                                             void* stream, const cuda_ipc::SharedEvent* sendEvent, bool refused);
  char* manifestSpace(size_t bytes);
  // Whether `peer` maps this rank's shared memory (a shm connection), so that small messages to
  // it pay to travel inline (point_to_point.cpp); learned once per peer.
  bool mapsShm(int peer);

  std::shared_ptr<Communicator::State> state_;
  std::vector<uint64_t> sendsDone_, sendsReady_;  // SendReady / RecvDone signals consumed, by peer
  std::vector<int8_t> mapsShm_;                    // mapsShm, by peer: -1 not known yet
  // Where this rank's manifests live: shared memory, so a same-node receiver reads them with a
  // plain copy. Grown, never shrunk; touched only by batches with sends.
  std::unique_ptr<SharedAllocation> manifests_;
  // A sender's manifest this rank read but has not wholly received, by sending peer; touched only
  // by batches with receives. Messages match in order per direction, whatever the batches on
  // either side (as NCCL matches sends and receives across groups): a batch may receive the
  // first messages of a manifest and a later batch the rest, the sender waiting for the answer.
  struct Reading;
  std::vector<std::unique_ptr<Reading>> reading_;
  std::vector<char> manifestIn_;  // a peer's manifest as read, before its Reading takes it (receives only)
  // GPU memory: the batch event (batches with sends) and each sender's receive event (batches
  // with receives), made on first use, remade when the stream's device changes.
  std::unique_ptr<cuda_ipc::SharedEvent> batchEvent_;
  std::vector<std::unique_ptr<cuda_ipc::SharedEvent>> receiveEvents_;  // by sending peer
  // Completions of GPU batches not yet known finished (synchronize); a send batch and a receive
  // batch may run at once.
  std::mutex completionsMu_;
  std::deque<std::shared_ptr<DeviceCompletion>> completions_;
  std::deque<std::shared_ptr<Work>> queued_;  // tracked queued batches on GPU memory
};

}  // namespace forestcc::collectives
