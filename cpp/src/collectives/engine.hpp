// The collectives engine of one communicator, under the public API (forestcc/collective_api.hpp):
// plan selection (tuning rules, built-in generators), the one plan cache, the order of calls
// (synchronous and queued asynchronous ones run one at a time, in call order), stand-in buffers
// and point-to-point send/recv.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/point_to_point.hpp"
#include "collectives/tuning_table.hpp"
#include "executor/executor.hpp"
#include "forestcc/collective_api.hpp"
#include "forestcc/collectives.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/plan.hpp"

namespace forestcc::collectives {

using executor::CompiledPlan;

// Completion of a queued call (the public forestcc::Work).
using forestcc::Work;

// Runs functions one at a time in submission order: queued ones on its own thread, inline ones
// on the caller after everything queued before them.
class OrderedQueue {
 public:
  ~OrderedQueue();
  std::shared_ptr<Work> submit(std::function<void()> fn);
  // A template, not a std::function: a small blocking call must not allocate.
  template <class F>
  void runInline(F&& fn) {
    drain();
    std::lock_guard<std::mutex> r(runMu_);
    fn();
  }
  void drain();

 private:
  void loop();
  std::mutex runMu_;  // one function at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idleCv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work>>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<Communicator> comm);
  ~Engine();

  Communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  void setTuning(std::vector<TuningRule> rules);
  // True when some rule depends on the memory kind (the caller then works it out per call).
  bool tunedByMemory() const { return tunedByMemory_; }
  // The tuned algorithm for a call on this communicator's ranks and nodes ("" when no rule
  // matches; tuning_table.hpp, selectAlgorithm); memory: kPrivateMemory,
  // kSharedMemory, or kAnyMemory when unknown (then memory-specific rules do not match); inPlace:
  // kOutOfPlace, kInPlace, or kAnyPlacement when unknown (then placement-specific rules do not
  // match).
  const std::string& choose(plan::Collective c, uint64_t bytes, int memory, int inPlace) const;
  // How many nodes the communicator's ranks are on.
  int nodes() const { return int(nodeCount_); }
  // A built-in plan, generated and compiled once per (algorithm, collective, root, in place):
  // the node layout, the other input of a generator, is the communicator's and never changes.
  // Entries live as long as the engine.
  struct BuiltinPlan {
    std::string algorithm;
    int root;
    bool inPlace;
    std::shared_ptr<const CompiledPlan> plan;
  };
  const BuiltinPlan& builtinPlan(const std::string& algorithm, plan::Collective c, int root, bool inPlace);
  std::shared_ptr<const CompiledPlan> builtin(const std::string& algorithm, plan::Collective c, int root, bool inPlace) {
    return builtinPlan(algorithm, c, root, inPlace).plan;
  }
  // The built-in plan the last call of `c` by algorithm name or "auto" ran (null before any).
  std::shared_ptr<const CompiledPlan> lastBuiltin(plan::Collective c) const;
  std::shared_ptr<const CompiledPlan> compile(const plan::Plan& p);
  // A plan file (plan::loadPlanFile: errors name the file, rank, worker and step), loaded and
  // compiled once per version of the file (path, modification time, size); kept as long as the
  // engine. The Python package proves plan files with the verifier before calling in.
  const std::shared_ptr<const CompiledPlan>& planFile(const std::string& path);

  // The buffer a rank does not have (gather's output, scatter's input away from the root): the
  // engine stages an uninitialized stand-in there (plans write before they read it).
  enum class StandIn : uint8_t { None, Input, Output };
  // Runs a plan now on the calling thread, after every queued collective has finished.
  void run(const CompiledPlan& p, CallBuffers& b, StandIn standIn = StandIn::None);
  // Queues a collective behind earlier ones.
  std::shared_ptr<Work> submit(const std::shared_ptr<const CompiledPlan>& p, const CallBuffers& b,
                               StandIn standIn = StandIn::None);
  // Waits for every queued call.
  void drain();
  // The caller's next collective is refused (Executor::refuseCall), in call order: queued behind
  // earlier calls, without waiting for them. Never throws.
  void refuse() noexcept;
  // A call on GPU memory: enqueued on options.stream after every queued host call, returning at
  // once (a Work that waits for the GPU when options.async).
  std::shared_ptr<Work> runOnDevice(const CompiledPlan& p, const CallBuffers& b, StandIn standIn,
                                    const CallOptions& options);
  // Waits until every call on GPU memory finished; raises the first error one hit.
  void synchronizeDevice();

  // Rendezvous point-to-point (point_to_point.hpp): a send completes when the receiver has
  // copied the data. Sends run in order, receives run in order, independently of each other and
  // of collectives (an asynchronous send followed by a blocking receive is how ranks exchange); a
  // batch with both takes its place in both orders when it is called: it runs after every send
  // and receive called before it and before every one called after it (else a later receive
  // from the same peer could take the message meant for the batch).
  // GPU memory (device >= 0): enqueued on `stream` (Collectives::sendRecv).
  std::shared_ptr<Work> send(const void* data, size_t bytes, int peer, bool async, int device, void* stream);
  std::shared_ptr<Work> recv(void* data, size_t bytes, int peer, bool async, int device, void* stream);
  std::shared_ptr<Work> sendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, bool async,
                                 void* stream);
  // Waits until every send/recv batch on GPU memory called so far ran and finished on the GPU.
  void synchronizeSendRecv();
  // A batch the caller refused for its arguments (PointToPoint::refuse: only each message's peer
  // counts), queued in call order as the batch would have been, without waiting for it. Never throws.
  void refuseSendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs) noexcept;

 private:
  void checkPeer(int peer, const char* what) const;
  void runBatch(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, void* stream);
  // Queues a batch; it leaves its GPU completion (PointToPoint::run) in *completion (null: the
  // batch is refused, PointToPoint::refuse).
  // sendEvent: its batch event, recorded at the call (PointToPoint::recordAtCall), or null.
  std::shared_ptr<Work> submitBatch(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, void* stream,
                                    std::shared_ptr<std::shared_ptr<DeviceCompletion>> completion,
                                    std::shared_ptr<cuda_ipc::SharedEvent> sendEvent);
  void execute(const CompiledPlan& p, const CallBuffers& b);

  std::shared_ptr<Communicator> comm_;
  std::vector<int> nodeOf_;  // the node of every rank, for hierarchical generators
  int nodeCount_ = 1;        // for tuning rules
  executor::Executor executor_;
  std::vector<TuningRule> rules_;
  bool tunedByMemory_ = false;
  std::mutex cacheMu_;
  std::map<std::tuple<std::string, int, int, bool>, std::unique_ptr<BuiltinPlan>> cache_;
  std::map<std::tuple<std::string, int64_t, int64_t>, std::shared_ptr<const CompiledPlan>> files_;
  // The last built-in plan per collective: a repeated call finds it with one atomic load and a
  // comparison, without the lock or the map (entries are never freed before the engine).
  std::atomic<const BuiltinPlan*> last_[plan::kCollectiveCount] = {};
  // Blocking calls' stand-in, touched only inside run (one call at a time); grown, never shrunk:
  // zero-filling or reallocating a large stand-in on every call cost more than the collective.
  std::unique_ptr<char[]> standIn_;
  size_t standInBytes_ = 0;

  // Declared before the queues, so it outlives them: queued batches call it. (~Engine drains
  // every queue before any member goes.)
  std::unique_ptr<PointToPoint> p2p_;
  // Held while a batch with both sends and receives takes its place in both queues, so two of
  // them called at once from two threads are in the same order in both (else each would wait
  // for the other's place).
  std::mutex bothQueuesMu_;
  OrderedQueue collectives_, recvs_, sends_;
};

}  // namespace forestcc::collectives
