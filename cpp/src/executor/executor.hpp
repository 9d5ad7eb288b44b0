// The CPU executor: runs this rank's part of a plan on the buffers of one call. Workers are
// threads (worker 0 is the calling thread); put/get are copies into mapped peer memory, or
// single-copy cross-process writes/reads when the peer's buffer is ordinary process memory; a
// signal is a release add on the peer's semaphore. Copies are synchronous, so flush is a fence.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/state.hpp"
#include "forestcc/collectives.hpp"
#include "forestcc/plan.hpp"

namespace forestcc::executor {

struct ExecChannel {
  int peer = 0;
  uint64_t* inbound = nullptr;   // our semaphore for this pair
  uint64_t* outbound = nullptr;  // the peer's semaphore for this pair
  uint64_t* expected = nullptr;  // signals consumed so far (kept by the executor across calls)
  ControlBlock* peerBlock = nullptr;  // its scratch banks (eager plans) and mailbox (call stamps)
};

// One rank's part of a plan, bound to this communicator's semaphores. Made once, run many times.
struct CompiledPlan {
  std::string name;
  plan::Collective collective = plan::Collective::AllReduce;
  int nranks = 1;
  int root = -1;
  bool inPlace = false;
  uint32_t chunksPerBlock = 1;
  uint64_t inputChunks = 0, outputChunks = 0, scratchChunks = 0;
  uint32_t maxSlices = 1;
  uint64_t minSliceBytes = 0;
  uint32_t scratchBanks = 1;  // 2: eager plan, scratch in the control blocks' banks
  // What every call of this plan stamps (control_block.hpp): plan hash, collective, root and
  // generator, made once here; a call adds its number, count, dtype, op and layout.
  CallStamp stamp{};
  std::vector<ExecChannel> channels;
  std::vector<std::vector<plan::Op>> workers;
};

// Where a check happened, for its message: a plan step, or a fixed text. Plain data, so checks
// that pass (every call) cost no string formatting.
struct Where {
  const CompiledPlan* plan = nullptr;  // null: `text` says it
  int worker = 0;
  size_t step = 0;
  const plan::Op* op = nullptr;
  uint32_t slice = 0;
  const char* text = "";
  std::string describe() const;
};

// A peer's buffer of the current call as this process reaches it.
struct RemoteBuffer {
  uint64_t segmentId = 0;       // the mapped segment cached in segmentBase
  char* segmentBase = nullptr;
  char* mapped = nullptr;  // direct access when non-null
  uint64_t address = 0;    // else process_vm_writev/readv at this address
  uint64_t bytes = 0;
};

struct PeerView {
  uint64_t sequence = 0;  // call whose descriptors are cached
  uint64_t checked = 0;   // call whose stamp was found equal to this rank's
  RemoteBuffer buffers[3];
  const uint64_t* blockOffsets[2] = {nullptr, nullptr};
};

class Executor {
 public:
  explicit Executor(std::shared_ptr<Communicator::State> state);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Checks the plan against this communicator (rank count, same-node peers, channel limits).
  std::shared_ptr<const CompiledPlan> compile(const plan::Plan& plan);
  // Runs one call. Collectives on one communicator must not run concurrently (the engine
  // serializes them); every rank runs plans in the same order.
  void run(const CompiledPlan& plan, const CallBuffers& call);

  Communicator::State& state() { return *state_; }
  // Maps a peer's shared segment once and returns its base address.
  char* mapSegment(const BufferDescriptor& d, int peer);

 private:
  struct Call;
  struct WorkerThread;
  void runWorker(Call& call, int worker);
  void publish(Call& call);
  const PeerView& peerView(Call& call, int worker, int peer);
  // Throws a Mismatch (and poisons the communicator) unless `peer`'s stamp `theirs` is of this
  // call and equal to this rank's. `where` names the step that looked, for the message.
  void checkStamp(const Call& call, int peer, const CallStamp& theirs, const Where& where);
  // After a wait on `peer` ended: its stamp of this call, once per call and worker.
  void confirmPeer(Call& call, int worker, const ExecChannel& ch, const Where& where);
  // While a wait on `peer` blocks: a peer that entered this call with another stamp, or left it
  // without sending what is awaited, is an error now rather than at the timeout.
  template <class Ready>
  void watchPeer(const Call& call, int peer, Ready& ready, const Where& where);
  // Every kStampWindow calls: wait until every same-node peer entered the call kStampWindow
  // before this one, so no peer's stamp of a call is overwritten before this rank checked it.
  void awaitStampWindow(uint64_t sequence);
  // Eager calls: every peer made this call with the same stamp.
  void checkEagerPeers(const Call& call);
  // One line per local rank: its stamp of this call (FORESTCC_DEBUG adds it to mismatch errors).
  std::string stampTable(const Call& call);
  void ensureScratch(uint64_t bytes);

  std::shared_ptr<Communicator::State> state_;
  uint64_t streamingBytes_;                  // FORESTCC_STREAMING_BYTES, read once
  bool debug_;                               // FORESTCC_DEBUG, read once
  std::vector<uint64_t> expected_;           // [local index][pair index]
  std::shared_ptr<ShmSegment> scratch_;
  // What publish() last wrote into the mailbox, so an unchanged buffer is not described again
  // (a registry lookup and a formatted name per call otherwise).
  struct Published {
    uint64_t address = 0, bytes = 0, generation = 0;
  } published_[2];
  const ShmSegment* publishedScratch_ = nullptr;
  uint64_t sequence_ = 0;
  uint64_t eagerCalls_ = 0;  // calls of plans with scratch banks: bank = eagerCalls_ mod 2
  std::vector<std::vector<PeerView>> views_;  // [worker][peer]
  std::vector<std::vector<char>> bounce_;     // [worker]: get_reduce's tiles of unmapped peer memory
  std::mutex segmentsMu_;
  std::map<uint64_t, std::shared_ptr<ShmSegment>> segments_;  // peers' segments we mapped

  // Worker threads for plans with more than one worker (worker 0 runs on the caller).
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::mutex poolMu_;
  std::condition_variable poolCv_;
  std::condition_variable doneCv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  Call* current_ = nullptr;
  std::exception_ptr firstError_;
};

uint64_t segmentIdOf(const std::string& name);

}  // namespace forestcc::executor
