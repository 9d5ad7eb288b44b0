// The executor: runs this rank's part of a plan on the buffers of one call. A plan is compiled once
// (channels resolved to connections and semaphore words); each call publishes what it is (stamp,
// buffer handles) through the connections, then the interpreter (interpreter.hpp) runs each
// worker's ops over the CPU backend (cpu_backend.hpp): workers are threads, worker 0 the caller.
// Everything about a peer goes through its Connection (transport/connection.hpp): this folder
// maps no segment, calls no process_vm_* and reads no control block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/state.hpp"
#include "executor/huge_pages.hpp"
#include "executor/interpreter.hpp"
#include "forestcc/collectives.hpp"
#include "forestcc/config.hpp"
#include "forestcc/plan.hpp"
#include "transport/connection.hpp"

namespace forestcc::executor {

struct PeerBuffer {
  RemoteRegion region;
  Connection* connection = nullptr;  // the one that reaches it (write/read when not mapped)
};

struct ExecChannel {
  int peer = 0;
  int pair = 0;                  // the plan-channel pair number between the two ranks
  uint64_t* inbound = nullptr;   // this rank's semaphore for this pair
  uint64_t* outbound = nullptr;  // the peer's, where the link maps it (else link->signal)
  Doorbell* doorbell = nullptr;  // the peer's, rung after adding to outbound (set with it)
  uint64_t* expected = nullptr;  // signals consumed so far (kept by the executor across calls)
  Connection* link = nullptr;    // null for a loopback channel
  PeerBuffer banks[2];           // the peer's eager scratch banks (mapped, or through the link)
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
  // Eager plans whose calls can move their data as packets (packet_plan.hpp); its waits are
  // marked in `workers`. Whether a call does depends on its size and FORESTCC_PACKETS.
  bool packetable = false;
  // Every peer's banks are mapped here (not so through tcp, FORESTCC_TRANSPORT=tcp on one node):
  // host calls store packets into them.
  bool banksMapped = false;
  // What every call of this plan stamps (control_block.hpp): plan hash, collective, root and
  // generator, made once here; a call adds its number, count, dtype, op and layout.
  CallStamp stamp{};
  std::vector<ExecChannel> channels;
  std::vector<std::vector<plan::Op>> workers;
  std::vector<std::vector<Connection*>> workerLinks;  // per worker: the links its puts go through
  // The links to the peers whose call buffers this rank puts into (not their eager banks): held
  // for each call (Connection::holdBuffers; docs/transports.md, "Faults on one node").
  std::vector<Connection*> bufferLinks;
  // Plans with scratch_blocks (all_to_all_v through scratch; scratch_layout.cpp): the ranks whose
  // scratch this rank reaches (itself first when it has scratch), their blocks' sources, and the
  // ranks whose input counts size those blocks.
  struct ScratchLayout {
    int rank = 0;
    std::vector<plan::BlockSource> blocks;
  };
  std::vector<ScratchLayout> scratchLayouts;
  std::vector<int> layoutSources;
  bool laysOutScratch = false;  // some rank of the plan has scratch_blocks
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
struct PeerView {
  uint64_t sequence = 0;  // call whose buffers are cached
  uint64_t checked = 0;   // call whose stamp was found equal to this rank's
  PeerBuffer buffers[plan::kBufferCount];
  const uint64_t* blockOffsets[2] = {nullptr, nullptr};
};

struct CpuBackend;
class DeviceRunner;
class CudaRunner;

// "all_reduce(count=1000, dtype=float32, op=sum, plan=forestcc.builtin.direct#3f2a...)".
std::string describeCall(const CallStamp& stamp);

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

  // Enqueues one call on GPU memory on `stream` (a cudaStream_t) and returns: the CUDA runner
  // (device_runner.hpp). Errors of calls already enqueued are raised here first.
  void runOnDevice(const CompiledPlan& plan, const CallBuffers& call, int standIn, void* stream);
  // Blocks until every call enqueued on GPU memory finished; raises the first error one hit.
  void synchronizeDevice();
  // The completion of the last call enqueued on GPU memory (DeviceRunner::completion): what an
  // asynchronous Work of such a call waits for.
  std::function<bool(bool)> deviceCompletion();

  // This rank will not take part in its next call: an error in the call's arguments or plan was
  // raised before the call took its number. The refusal takes the number and is published as
  // the call's stamp (kRefusedCall), so peers that entered the call raise a MismatchError naming
  // this rank, rather than meeting this rank's next call in its place (schedules/README.md,
  // "Refused calls"). Never throws: the caller raises the refusal's own error.
  void refuseCall() noexcept;

  struct Call;

 private:
  friend struct CpuBackend;
  friend class CudaRunner;
  DeviceRunner& device();
  // The start every runner shares: a poisoned communicator raises; the call's plan, buffers and
  // the geometry's element size, count and chunks per block.
  void beginCall(Call& call, const CompiledPlan& p, const CallBuffers& buffers);
  // A call's pipelining slices (schedules/README.md, "Pipelining"); `minSliceFloor` raises the
  // plan's minimum slice (the GPU runner's).
  static uint32_t slicesOf(const CompiledPlan& p, const CallGeometry& g, uint64_t minSliceFloor = 0);
  // Takes the next call number and fills the call's stamp (after the geometry: whether the call
  // uses packets is part of it).
  void numberCall(Call& call);
  struct WorkerThread;
  void runWorker(Call& call, int worker);
  // The interpreter stopped with `f` on `worker`: the error that says so (failure.cpp), or the
  // backend's own exception with the step added.
  // The error carries its context as data too (ErrorContext: collective, plan, worker, step).
  [[noreturn]] void raiseFailure(const Call& call, int worker, const Failure& f, std::exception_ptr backendError);
  [[noreturn]] void raiseFailureText(const Call& call, int worker, const Failure& f, std::exception_ptr backendError);
  ErrorContext contextOf(const Call& call, int worker, int64_t step) const;
  void publish(Call& call);
  // Wakes same-node peers asleep waiting for this rank to enter a call (after its sequence store).
  void ringPeerDoorbells();
  const PeerView& peerView(Call& call, int worker, int peer);
  // Throws a Mismatch (and poisons the communicator) unless `peer`'s stamp of this call is equal
  // to this rank's. `where` names the step that looked, for the message.
  void checkStamp(const Call& call, int peer, const Where& where);
  // Blocks until `peer` entered this call (published it), up to the communicator's timeout;
  // `purpose` ends the error's "waiting for rank P to enter it" (e.g. " and publish its counts").
  void awaitEntered(const Call& call, int peer, const char* purpose = "");
  // The same for a stamp already read (`read`: it was read whole).
  void checkStampValue(const Call& call, int peer, bool read, const CallStamp& theirs, const Where& where);
  // After a wait on `ch`'s peer ended: its stamp of this call, once per call and worker. `at`
  // holds the step and slice, for the message.
  void confirmPeer(Call& call, int worker, const ExecChannel& ch, const Failure& at);
  // The slow path of a wait: poll `ready` (`ch`'s semaphore, or packets from its peer) up to the
  // deadline, watching the peer; `awaited` names what is awaited in the error.
  void blockInWait(Call& call, int worker, const ExecChannel& ch, const std::function<bool()>& ready,
                   const Failure& at, const char* awaited);
  Where whereOf(const Call& call, int worker, const Failure& at) const;
  // Before call `sequence` takes its number, every kStampWindow calls (others return at once):
  // wait until every connected peer entered the call kStampWindow before it, so no peer's stamp of
  // a call is overwritten before this rank checked it.
  void awaitStampWindow(uint64_t sequence);
  // Whether an eager call of `p` with `scratchBytes` of scratch moves its data as packets, on
  // host memory or (`device`) GPU memory. Ranks must decide alike: the decision is in the stamp.
  bool usesPackets(const CompiledPlan& p, const CallGeometry& g, uint64_t scratchBytes, bool device) const;
  // Eager calls: every peer made this call with the same stamp.
  void checkEagerPeers(const Call& call);
  // One line per local rank: its stamp of this call (FORESTCC_DEBUG adds it to mismatch errors).
  std::string stampTable(const Call& call);
  void ensureScratch(uint64_t bytes);
  // all_to_all_v on a plan with scratch_blocks: after this rank published its call, reads the
  // input counts of the layouts' source ranks (each waited for until it entered the call), sizes
  // every scratch block this rank reaches, and publishes its own scratch (scratch_layout.cpp).
  void layOutScratch(Call& call);
  // The mailbox's scratch handle for this call (publish() and layOutScratch()).
  void publishScratch(const Call& call);

  std::shared_ptr<Communicator::State> state_;
  uint64_t streamingBytes_;                  // FORESTCC_STREAMING_BYTES, read once
  bool debug_;                               // FORESTCC_DEBUG, read once
  config::PacketMode packets_;               // FORESTCC_PACKETS, read once
  std::vector<uint64_t> expected_;           // [rank][pair index]
  int localIndex_ = 0;                       // this rank's index among its node's ranks
  std::unique_ptr<SharedAllocation> scratch_;  // per-call scratch (peers map it)
  // What publish() last wrote into the mailbox, so an unchanged buffer is not described again
  // (a registry lookup and a formatted name per call otherwise).
  struct Published {
    uint64_t address = 0, bytes = 0, generation = 0;
    bool privateHost = false;  // this process's own host memory (not forestcc's shared segments)
  } published_[2];
  HugePageAdvisor hugePages_;  // FORESTCC_HUGE_PAGE_BYTES, read once
  // Same-node peers' doorbells, rung when this rank enters a call (made on first use: the
  // connections never change after the communicator is made).
  std::vector<Doorbell*> peerDoorbells_;
  bool peerDoorbellsKnown_ = false;
  const void* publishedScratch_ = nullptr;  // the scratch whose handle is in the mailbox (null: none)
  bool scratchPublished_ = false;           // the mailbox's scratch handle was written once
  uint64_t sequence_ = 0;
  uint64_t refused_ = 0;  // the last call this rank refused (refuseCall), for the next calls' mismatch messages
  uint64_t eagerCalls_ = 0;  // calls of plans with scratch banks: bank = eagerCalls_ mod 2
  std::vector<std::vector<PeerView>> views_;  // [worker][peer]
  std::vector<std::vector<char>> bounce_;     // [worker]: get_reduce's tiles of unmapped peer memory
  std::vector<std::vector<uint64_t>> sourceOffsets_;   // [rank]: layout sources' input block offsets
  std::vector<std::vector<uint64_t>> scratchOffsets_;  // [rank]: its scratch blocks' offsets (elements)
  std::unique_ptr<DeviceRunner> device_;     // made on the first call on GPU memory

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

}  // namespace forestcc::executor
