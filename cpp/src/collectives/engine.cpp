#include "collectives/engine.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>
#include <string>

#include <sys/stat.h>

#include "collectives/generators.hpp"
#include "core/on_error.hpp"
#include "forestcc/plan_file.hpp"
#include "core/state.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives {

// ---- OrderedQueue ---------------------------------------------------------------------------

OrderedQueue::~OrderedQueue() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> OrderedQueue::submit(std::function<void()> fn) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.emplace_back(std::move(fn), work);
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { loop(); });
      } catch (...) {
        queue_.pop_back();  // not queued after all: the caller's error says so (and nothing runs it)
        throw;
      }
    }
  }
  cv_.notify_one();
  return work;
}

void OrderedQueue::loop() {
  std::unique_lock<std::mutex> g(mu_);
  while (true) {
    cv_.wait(g, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) return;
    auto item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    g.unlock();
    std::exception_ptr error;
    try {
      std::lock_guard<std::mutex> r(runMu_);
      item.first();
    } catch (...) {
      error = std::current_exception();
    }
    item.second->finish(error);
    g.lock();
    busy_ = false;
    if (queue_.empty()) idleCv_.notify_all();
  }
}

void OrderedQueue::drain() {
  std::unique_lock<std::mutex> g(mu_);
  idleCv_.wait(g, [&] { return queue_.empty() && !busy_; });
}

// ---- Engine -----------------------------------------------------------------------------------

Engine::Engine(std::shared_ptr<Communicator> comm)
    : comm_(std::move(comm)), executor_(comm_->state()) {
  for (int r = 0; r < comm_->size(); ++r) nodeOf_.push_back(comm_->nodeOf(r));
  nodeCount_ = comm_->nodeCount();
  p2p_ = std::make_unique<PointToPoint>(comm_->state());
}

// Every queued call finishes before anything it uses is destroyed (a batch on the send queue
// waits for its place in the receive queue, so each queue is drained, not just destroyed in turn).
Engine::~Engine() { drain(); }

void Engine::setTuning(std::vector<TuningRule> rules) {
  clampToAlgorithms(rules, comm_->size());
  rules_ = std::move(rules);
  tunedByMemory_ = std::any_of(rules_.begin(), rules_.end(), [](const TuningRule& r) { return r.memory != kAnyMemory; });
}

const std::string& Engine::choose(plan::Collective c, uint64_t bytes, int memory, int inPlace) const {
  return selectAlgorithm(rules_, CallShape{c, comm_->size(), int(nodeCount_), bytes, memory, inPlace});
}

const Engine::BuiltinPlan& Engine::builtinPlan(const std::string& algorithm, plan::Collective c, int root,
                                               bool inPlace) {
  std::atomic<const BuiltinPlan*>& last = last_[static_cast<int>(c)];
  const BuiltinPlan* hit = last.load(std::memory_order_acquire);
  if (hit && hit->root == root && hit->inPlace == inPlace && hit->algorithm == algorithm) return *hit;
  auto key = std::make_tuple(algorithm, static_cast<int>(c), root, inPlace);
  {
    std::lock_guard<std::mutex> g(cacheMu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      last.store(it->second.get(), std::memory_order_release);
      return *it->second;
    }
  }
  // Generated and compiled outside the lock: it can take a while for many ranks.
  GenerateRequest req;
  req.collective = c;
  req.nranks = comm_->size();
  req.root = plan::rooted(c) ? root : -1;
  req.inPlace = inPlace;
  req.nodeOf = nodeOf_;
  auto compiled = executor_.compile(generate(algorithm, req));
  std::lock_guard<std::mutex> g(cacheMu_);
  std::unique_ptr<BuiltinPlan>& entry = cache_[key];
  if (!entry) entry.reset(new BuiltinPlan{algorithm, root, inPlace, std::move(compiled)});
  last.store(entry.get(), std::memory_order_release);
  return *entry;
}

std::shared_ptr<const CompiledPlan> Engine::lastBuiltin(plan::Collective c) const {
  const BuiltinPlan* last = last_[static_cast<int>(c)].load(std::memory_order_acquire);
  return last ? last->plan : nullptr;
}

std::shared_ptr<const CompiledPlan> Engine::compile(const plan::Plan& p) { return executor_.compile(p); }

const std::shared_ptr<const CompiledPlan>& Engine::planFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::string names;
    for (const std::string& n : algorithmNames()) names += (names.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::InvalidUsage,
                "algo: '" + path + "' is neither 'auto', a built-in algorithm (" + names + ") nor an existing plan file",
                rank());
  }
  auto key = std::make_tuple(path, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                             static_cast<int64_t>(st.st_size));
  {
    std::lock_guard<std::mutex> g(cacheMu_);
    auto it = files_.find(key);
    if (it != files_.end()) return it->second;
  }
  auto compiled = executor_.compile(plan::loadPlanFile(path));
  std::lock_guard<std::mutex> g(cacheMu_);
  std::shared_ptr<const CompiledPlan>& entry = files_[key];
  if (!entry) entry = std::move(compiled);
  return entry;
}

void Engine::execute(const CompiledPlan& p, const CallBuffers& b) { executor_.run(p, b); }

namespace {
// Points the buffer a rank does not have at `bytes` (at least 1) of `storage`.
// `bytes` for a stand-in, or an error that says what they were for.
char* allocateStandIn(size_t bytes, Engine::StandIn standIn, int rank) {
  try {
    return new char[bytes];
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::System, rankPrefix(rank) + "out of memory for the " + std::to_string(bytes) + "-byte stand-in " +
                                       (standIn == Engine::StandIn::Input ? "input" : "output") +
                                       " of a rooted collective (the engine allocates the buffer a rank other "
                                       "than the root does not pass)",
                rank);
  }
}
void stageStandIn(CallBuffers& b, Engine::StandIn standIn, char* storage) {
  if (standIn == Engine::StandIn::Input) b.input = storage;
  if (standIn == Engine::StandIn::Output) b.output = storage;
}
size_t standInBytes(const CallBuffers& b, Engine::StandIn standIn) {
  const size_t bytes = standIn == Engine::StandIn::Input ? b.inputBytes : b.outputBytes;
  return bytes ? bytes : 1;
}
}  // namespace

void Engine::run(const CompiledPlan& p, CallBuffers& b, StandIn standIn) {
  collectives_.runInline([&] {
    if (standIn != StandIn::None) {
      // A stand-in this rank cannot have refuses the call (it has no number yet): peers that
      // entered it raise rather than wait for this rank.
      OnError refusal([this] { executor_.refuseCall(); });
      const size_t bytes = standInBytes(b, standIn);
      if (standInBytes_ < bytes) {
        standIn_.reset();  // the old one's memory first: the new one may need it
        standInBytes_ = 0;
        standIn_.reset(allocateStandIn(bytes, standIn, comm_->rank()));
        standInBytes_ = bytes;
      }
      stageStandIn(b, standIn, standIn_.get());
      refusal.dismiss();
    }
    execute(p, b);
  });
}

std::shared_ptr<Work> Engine::submit(const std::shared_ptr<const CompiledPlan>& p, const CallBuffers& b,
                                     StandIn standIn) {
  // Not queued (no memory for its stand-in or the job): refused in its place.
  OnError refusal([this] { refuse(); });
  // A queued call keeps its own stand-in until it ran.
  std::shared_ptr<char[]> own;
  CallBuffers staged = b;
  if (standIn != StandIn::None) {
    own.reset(allocateStandIn(standInBytes(b, standIn), standIn, comm_->rank()));
    stageStandIn(staged, standIn, own.get());
  }
  std::shared_ptr<Work> work = collectives_.submit([this, p, staged, own] { execute(*p, staged); });
  refusal.dismiss();
  return work;
}

std::shared_ptr<Work> Engine::runOnDevice(const CompiledPlan& p, const CallBuffers& b, StandIn standIn,
                                          const CallOptions& options) {
  std::shared_ptr<Work> work;
  collectives_.runInline([&] {
    executor_.runOnDevice(p, b, static_cast<int>(standIn), options.stream);
    if (options.async) work = std::make_shared<Work>(executor_.deviceCompletion());
  });
  return work;
}

void Engine::synchronizeDevice() {
  collectives_.drain();
  executor_.synchronizeDevice();
  synchronizeSendRecv();
}

void Engine::refuse() noexcept {
  try {
    collectives_.submit([this] { executor_.refuseCall(); });
  } catch (...) {
    // No memory for the job: the peers find this rank at their timeout, as they would without.
  }
}

void Engine::drain() {
  collectives_.drain();
  sends_.drain();
  recvs_.drain();
}

}  // namespace forestcc::collectives
