#include "collectives/engine.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "collectives/generators.hpp"
#include "core/state.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "transport/remote_memory.hpp"

namespace forestcc::collectives {

// ---- Work -------------------------------------------------------------------------------------

void Work::wait() {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::completed() {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

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
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
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
  sendsDone_.assign(comm_->size(), 0);
  sendsReady_.assign(comm_->size(), 0);
}

Engine::~Engine() = default;

void Engine::setTuning(std::vector<TuningRule> rules) {
  // A rule never picks an algorithm for messages its plans cannot serve (eager: bank size). The
  // sizes it gives up go to the rule that took over where it ended (same collective, ranks,
  // memory and placement), which --tune measured next, rather than to no rule at all.
  for (size_t i = 0; i < rules.size(); ++i) {
    TuningRule& r = rules[i];
    const int64_t limit = algorithmMaxBytes(r.algorithm, r.collective, comm_->size());
    if (limit < 0 || (r.maxBytes >= 0 && r.maxBytes <= limit)) continue;
    const int64_t oldMax = r.maxBytes;
    r.maxBytes = limit;
    for (size_t j = i + 1; j < rules.size() && oldMax >= 0; ++j) {
      TuningRule& next = rules[j];
      if (next.collective == r.collective && next.minRanks == r.minRanks && next.maxRanks == r.maxRanks &&
          next.memory == r.memory && next.inPlace == r.inPlace &&
          next.minBytes == static_cast<uint64_t>(oldMax) + 1) {
        next.minBytes = static_cast<uint64_t>(limit) + 1;
        break;
      }
    }
  }
  rules_ = std::move(rules);
  tunedByMemory_ = std::any_of(rules_.begin(), rules_.end(), [](const TuningRule& r) { return r.memory != kAnyMemory; });
}

const std::string& Engine::choose(plan::Collective c, uint64_t bytes, int memory, int inPlace) const {
  static const std::string kNone;
  const int n = comm_->size();
  for (const TuningRule& r : rules_) {
    if (r.collective != c || n < r.minRanks || n > r.maxRanks || bytes < r.minBytes) continue;
    if (r.memory != kAnyMemory && r.memory != memory) continue;
    if (r.inPlace != kAnyPlacement && r.inPlace != inPlace) continue;
    if (r.maxBytes >= 0 && bytes > static_cast<uint64_t>(r.maxBytes)) continue;
    return r.algorithm;
  }
  return kNone;
}

std::shared_ptr<const CompiledPlan> Engine::builtin(const std::string& algorithm, plan::Collective c, int root,
                                                    bool inPlace) {
  auto key = std::make_tuple(algorithm, static_cast<int>(c), root, inPlace);
  {
    std::lock_guard<std::mutex> g(cacheMu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  GenerateRequest req;
  req.collective = c;
  req.nranks = comm_->size();
  req.root = plan::rooted(c) ? root : -1;
  req.inPlace = inPlace;
  auto compiled = executor_.compile(generate(algorithm, req));
  std::lock_guard<std::mutex> g(cacheMu_);
  cache_[key] = compiled;
  return compiled;
}

std::shared_ptr<const CompiledPlan> Engine::compile(const plan::Plan& p) { return executor_.compile(p); }

void Engine::execute(const CompiledPlan& p, const CallBuffers& b) { executor_.run(p, b); }

void Engine::run(const CompiledPlan& p, const CallBuffers& b) {
  collectives_.runInline([&] { execute(p, b); });
}

std::shared_ptr<Work> Engine::submit(const std::shared_ptr<const CompiledPlan>& p, const CallBuffers& b,
                                     std::shared_ptr<void> keepAlive) {
  return collectives_.submit([this, p, b, keepAlive] { execute(*p, b); });
}

void Engine::drain() {
  collectives_.drain();
  sends_.drain();
  recvs_.drain();
}

std::shared_ptr<Work> Engine::send(const void* data, size_t bytes, int peer, bool async) {
  checkPeer(peer, "send");
  if (async) return sends_.submit([this, data, bytes, peer] { sendNow(data, bytes, peer); });
  sends_.runInline([&] { sendNow(data, bytes, peer); });
  return nullptr;
}

std::shared_ptr<Work> Engine::recv(void* data, size_t bytes, int peer, bool async) {
  checkPeer(peer, "recv");
  if (async) return recvs_.submit([this, data, bytes, peer] { recvNow(data, bytes, peer); });
  recvs_.runInline([&] { recvNow(data, bytes, peer); });
  return nullptr;
}

// ---- point-to-point -------------------------------------------------------------------------

void Engine::checkPeer(int peer, const char* what) const {
  auto& s = *comm_->state();
  if (peer < 0 || peer >= s.size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer " + std::to_string(peer) +
                                             " is out of range (0.." + std::to_string(s.size - 1) + ")", s.rank, peer);
  if (peer == s.rank)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer is this rank", s.rank, peer);
  if (s.nodeOf[peer] != s.nodeOf[s.rank])
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": rank " + std::to_string(peer) +
                                             " is on another node; this version moves data within one node only",
                s.rank, peer);
}

namespace {
int localIndexOf(const Communicator::State& s, int rank) {
  return static_cast<int>(std::find(s.localRanks.begin(), s.localRanks.end(), rank) - s.localRanks.begin());
}

void waitCounter(Communicator::State& s, uint64_t* counter, uint64_t want, int peer, const std::string& what) {
  if (__atomic_load_n(counter, __ATOMIC_ACQUIRE) >= want) return;
  WaitOutcome outcome;
  try {
    outcome = waitUntil([&] { return __atomic_load_n(counter, __ATOMIC_ACQUIRE) >= want; },
                        s.waitPolicy(peer, s.timeout));
  } catch (const Error& e) {
    // Interrupted (Ctrl-C) with a send posted or a receive counted: the pair is out of step (the
    // peer may still read a buffer the caller frees), so no later call may trust it. (Other
    // failures of a wait poison where they are raised.)
    if (e.code() == ErrorCode::Interrupted) s.poison(rankPrefix(s.rank) + what + " was interrupted");
    throw;
  }
  if (outcome != WaitOutcome::Ready) s.raiseWaitFailure(outcome, peer, what, s.timeout);
}
}  // namespace

void Engine::sendNow(const void* data, size_t bytes, int peer) {
  auto& s = *comm_->state();
  const int me = localIndexOf(s, s.rank), them = localIndexOf(s, peer);
  SendPost& post = s.control->sendPosts[them];
  post.buffer.address = reinterpret_cast<uint64_t>(data);
  post.buffer.bytes = bytes;
  size_t offset = 0;
  auto seg = bytes ? findSharedAllocation(data, bytes, &offset) : nullptr;
  post.buffer.segmentId = seg ? executor::segmentIdOf(seg->name()) : 0;
  if (seg) {
    post.buffer.segmentSize = seg->size();
    post.buffer.offset = offset;
    std::snprintf(post.buffer.segmentName, sizeof post.buffer.segmentName, "%s", seg->name().c_str());
  }
  post.status = 0;
  __atomic_fetch_add(&s.peerControl(peer)->sendReady[me].value, 1, __ATOMIC_RELEASE);
  const uint64_t want = ++sendsDone_[peer];
  waitCounter(s, &s.control->recvDone[them].value, want, peer,
              "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) + " (waiting for its recv)");
  const int64_t status = __atomic_load_n(&post.status, __ATOMIC_ACQUIRE);
  if (status < 0)
    throw Error(ErrorCode::Remote, rankPrefix(s.rank) + "send of " + std::to_string(bytes) + " bytes to rank " +
                                       std::to_string(peer) + ": the receiver failed to copy the data", s.rank, peer);
  if (status > 0)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "send of " + std::to_string(bytes) + " bytes to rank " +
                                             std::to_string(peer) + ": the matching recv expected " +
                                             std::to_string(status - 1) + " bytes", s.rank, peer);
}

void Engine::recvNow(void* data, size_t bytes, int peer) {
  auto& s = *comm_->state();
  const int me = localIndexOf(s, s.rank), them = localIndexOf(s, peer);
  const uint64_t want = ++sendsReady_[peer];
  waitCounter(s, &s.control->sendReady[them].value, want, peer,
              "recv of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer) + " (waiting for its send)");
  ControlBlock* theirs = s.peerControl(peer);
  SendPost& post = theirs->sendPosts[me];
  const uint64_t sent = post.buffer.bytes;
  auto done = [&](int64_t status) {
    __atomic_store_n(&post.status, status, __ATOMIC_RELAXED);
    __atomic_fetch_add(&theirs->recvDone[me].value, 1, __ATOMIC_RELEASE);
  };
  if (sent != bytes) {
    done(static_cast<int64_t>(bytes) + 1);
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "recv of " + std::to_string(bytes) + " bytes from rank " +
                                             std::to_string(peer) + ": it sent " + std::to_string(sent) + " bytes",
                s.rank, peer);
  }
  try {
    if (bytes) {
      if (post.buffer.segmentId) {
        std::memcpy(data, executor_.mapSegment(post.buffer, peer) + post.buffer.offset, bytes);
      } else {
        RemoteMemory::inProcess(s.peers[peer].pid, post.buffer.address, bytes, s.rank, peer).read(0, data, bytes);
      }
    }
  } catch (...) {
    done(-1);
    throw;
  }
  done(0);
}

}  // namespace forestcc::collectives
