// The shim communicator's lifetime: connecting (blocking or on a thread), the calls inside it,
// abort, finalize, and its errors.
#include "nccl/comm.hpp"

#include <chrono>
#include <system_error>
#include <unordered_set>

#include "forestcc/error.hpp"
#include "nccl/call_threads.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::NcclError;

namespace forestcc::nccl {

namespace {
thread_local const Background* runningBackground = nullptr;  // the group this thread runs, if any
thread_local const ncclComm* connectingHere = nullptr;        // the communicator this thread connects
}

Background::~Background() {
  // Its call thread touches it until the group ended (a kept thread, not joined).
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ended_ || !started_; });
}

void Background::start(const std::vector<ncclComm*>& members, std::function<void()> work) {
  // Taken outside mu_: a Hold locks its communicator, and asyncError holds that lock while it
  // asks ended().
  std::vector<std::shared_ptr<void>> holds;
  for (ncclComm* c : members) holds.push_back(std::make_shared<ncclComm::Hold>(c));
  {
    std::lock_guard<std::mutex> lock(mu_);
    members_ = members;
    holds_ = std::move(holds);
    started_ = true;
  }
  // The members go before the group counts as ended (a waiter may free a communicator as soon
  // as it has), and leave members_ before their holds go (abortMembers must not reach a freed one).
  auto letGo = [this] {
    std::vector<std::shared_ptr<void>> holds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      members_.clear();
      holds.swap(holds_);
    }
    holds.clear();
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  };
  try {
    runOnCallThread([this, letGo, work = std::move(work)]() mutable {
      runningBackground = this;
      {
        std::function<void()> body = std::move(work);
        body();  // catches what it throws (runInBackground)
      }
      runningBackground = nullptr;  // the thread is kept for other calls
      letGo();
    });
  } catch (const std::system_error& e) {
    // No thread: nothing ran (the call returns this, the communicator is as it was), and no later
    // call may wait for the group.
    letGo();
    throw NcclError(ncclSystemError, std::string("could not start the call's thread: ") + e.what());
  } catch (...) {
    letGo();
    throw;
  }
}

void Background::abortMembers(const ncclComm* caller, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // A follower (runInBackground) aborting does not end the call it waits for.
  if (std::find(members_.begin(), members_.end(), caller) == members_.end()) return;
  aborted_ = true;
  for (ncclComm* c : members_)
    if (c != caller) c->poison(reason);
}

bool Background::abortedHere() { return runningBackground && runningBackground->aborted_.load(); }

bool Background::ended() {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void Background::wait() {
  if (onThisThread(this)) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ended_; });
}

bool Background::onThisThread(const Background* b) { return b && runningBackground == b; }

}  // namespace forestcc::nccl

namespace {
std::mutex gLiveMu;
// Never destroyed: a communicator may be destroyed by an atexit handler after static destructors.
std::unordered_set<const ncclComm*>& liveComms() {
  static auto* live = new std::unordered_set<const ncclComm*>;
  return *live;
}
}  // namespace

ncclComm::ncclComm(int r, int n, forestcc::nccl::CommConfig c) : rank(r), size(n), config(std::move(c)) {
  std::lock_guard<std::mutex> g(gLiveMu);
  liveComms().insert(this);
}

bool ncclComm::live(const ncclComm* comm) {
  std::lock_guard<std::mutex> g(gLiveMu);
  return liveComms().count(comm) != 0;
}

ncclComm::~ncclComm() {
  {
    std::lock_guard<std::mutex> g(gLiveMu);
    liveComms().erase(this);
  }
  if (growInvitation) forestcc::releaseUniqueId(*growInvitation);  // never answered
  joinConnecting();
  waitForBackground();
  background_.reset();
  for (auto& r : registrations) delete static_cast<char*>(r.first);
  paired.reset();  // before the forestcc communicator whose bootstrap it was paired over
  deviceWork_.reset();  // its poll uses the runner, which goes with the collectives
  collectives_.reset();
  communicator_.reset();
}

void ncclComm::attach(std::shared_ptr<forestcc::Communicator> communicator) {
  communicator_ = std::move(communicator);
  collectives_ = std::make_unique<forestcc::Collectives>(communicator_);
  attached_ = true;  // sequentially consistent, as Background::aborted_ (abortMembers, Use)
}

void ncclComm::poison(const std::string& reason) {
  if (attached_) communicator_->abort(reason);
}

std::function<void()> ncclComm::connector(std::function<void(ncclComm&)> connect, const char* call) {
  return [this, connect, call] {
    ncclResult_t result = forestcc::nccl::guarded(this, call, [&] {
      connect(*this);
      forestcc::nccl::pairWithFallback(*this);
      return ncclSuccess;
    });
    std::lock_guard<std::mutex> lock(mu_);
    if (asyncError_ == ncclInProgress || result != ncclSuccess) asyncError_ = result;
  };
}

void ncclComm::connectOnThread(std::function<void()> run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    asyncError_ = ncclInProgress;
  }
  std::lock_guard<std::mutex> lock(connectingMu_);
  // Aborted before its join started (a split's new communicator, started by the split's
  // background): nothing to join; abort() set aborted_ before it joined what had started.
  if (aborted_) return;
  connecting_ = std::thread([this, run = std::move(run)] {
    forestcc::nccl::connectingHere = this;
    run();
  });
}

void ncclComm::joinConnecting() {
  if (forestcc::nccl::connectingHere == this) return;
  std::lock_guard<std::mutex> lock(connectingMu_);
  if (connecting_.joinable()) connecting_.join();
}

ncclResult_t ncclComm::start(std::function<void(ncclComm&)> connect, const char* call) {
  if (config.blocking) {
    connector(std::move(connect), call)();
    std::lock_guard<std::mutex> lock(mu_);
    return asyncError_;
  }
  connectOnThread(connector(std::move(connect), call));
  return ncclInProgress;
}

void ncclComm::defer(std::function<void(ncclComm&)> connect, const char* call) {
  deferred_ = connector(std::move(connect), call);
  markPending();
}

void ncclComm::markPending() {
  std::lock_guard<std::mutex> lock(mu_);
  asyncError_ = ncclInProgress;
}

void ncclComm::startDeferred() {
  if (deferred_) connectOnThread(std::move(deferred_));
  deferred_ = nullptr;
}

ncclResult_t ncclComm::finishStart() {
  joinConnecting();
  std::lock_guard<std::mutex> lock(mu_);
  return asyncError_;
}

void ncclComm::waitUntilConnected() {
  if (connected_.load(std::memory_order_acquire)) return;
  joinConnecting();
  if (!collectives_) {
    std::lock_guard<std::mutex> lock(mu_);
    throw NcclError(ncclInvalidUsage, "the communicator failed to initialise: " + lastError_);
  }
  // Not on the connecting thread itself: there the join was skipped, and the connector has not
  // finished (pairing with the fallback comes after the attach).
  if (forestcc::nccl::connectingHere != this) connected_.store(true, std::memory_order_release);
}

void ncclComm::leave() {
  // Nobody waits for the communicator to be idle: a plain decrement. The waiters are counted
  // before it, since once it is done an abort may free the communicator; a waiter that comes
  // between the two is not notified, and finds the count at its next look (waitIdle).
  if (idleWaiters_.load() == 0) {
    inside_.fetch_sub(1);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (inside_.fetch_sub(1) == 1) idle_.notify_all();
}

void ncclComm::waitIdle(std::unique_lock<std::mutex>& lock, const std::function<bool()>& also) {
  idleWaiters_.fetch_add(1);
  while (!(inside_.load() == 0 && also())) idle_.wait_for(lock, std::chrono::milliseconds(10));
  idleWaiters_.fetch_sub(1);
}

namespace {
void refuseRevoked(const char* call) {
  forestcc::nccl::refuse(std::string("the communicator was revoked (ncclCommRevoke): ") + call +
                         " is refused; it takes only ncclCommSplit, ncclCommShrink, ncclCommDestroy and ncclCommAbort");
}
}  // namespace

ncclComm::Use::Use(ncclComm* comm, const char* call, Revoked revoked) : comm_(comm) {
  if (!comm) forestcc::nccl::badArgument(std::string(call) + ": comm is NULL");
  if (comm->aborted_) forestcc::nccl::refuse("the communicator was aborted (ncclCommAbort)");
  if (comm->revoked_ && revoked == Revoked::Refused) refuseRevoked(call);
  if (comm->finalized_) forestcc::nccl::refuse("the communicator was finalized (ncclCommFinalize)");
  comm->enter();
  try {
    comm->waitForBackground();  // the call before this one (non-blocking config)
    if (comm->aborted_) forestcc::nccl::refuse("the communicator was aborted (ncclCommAbort)");
    if (comm->revoked_ && revoked == Revoked::Refused) refuseRevoked(call);
    if (comm->finalized_) forestcc::nccl::refuse("the communicator was finalized (ncclCommFinalize)");
    comm->waitUntilConnected();
    if (forestcc::nccl::Background::abortedHere())
      forestcc::nccl::refuse("ncclCommAbort was called on another communicator of this non-blocking group");
  } catch (...) {
    comm->leave();
    throw;
  }
}

ncclComm::Use::~Use() { comm_->leave(); }

ncclComm::Hold::Hold(ncclComm* comm) : comm_(comm) {
  if (comm_) comm_->enter();
}

ncclComm::Hold::~Hold() {
  if (comm_) comm_->leave();
}

std::shared_ptr<forestcc::nccl::Background> ncclComm::endRunningGroup(const std::string& reason) {
  // A group call on several communicators holds this one until it ended on all of them: the
  // others are ended too. A group that ended before this check ended by itself, so its other
  // communicators stay untouched.
  std::shared_ptr<forestcc::nccl::Background> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group = background_;
  }
  if (group && !group->ended())
    group->abortMembers(this, reason + ", on another communicator of the same non-blocking group");
  return group;
}

void ncclComm::abort(const std::string& reason) {
  endRunningGroup(reason);  // before this one is marked aborted (see there)
  aborted_ = true;
  *cancelConnecting_ = true;  // a rendezvous in progress ends within ~100 ms
  joinConnecting();
  if (communicator_) communicator_->abort(reason);
  std::unique_lock<std::mutex> lock(mu_);
  waitIdle(lock, [&] { return revoking_ == 0; });
}

void ncclComm::revoke(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++revoking_;  // an ncclCommAbort of another thread frees the communicator only after this
  }
  struct Done {  // whatever throws below, the count goes back (abort waits for it)
    ncclComm& c;
    ~Done() {
      std::lock_guard<std::mutex> lock(c.mu_);
      if (--c.revoking_ == 0) c.idle_.notify_all();
    }
  } done{*this};
  revoked_ = true;  // before the poison: a call that starts now is refused, not failed by it
  const std::shared_ptr<forestcc::nccl::Background> group = endRunningGroup(reason);
  joinConnecting();  // a rendezvous in progress ends by itself (deadline)
  poison(reason);
  if (group) group->wait();
  if (attached_) {
    try {
      collectives_->drain();  // queued work fails at once on the poison
    } catch (...) {
      // its failure is what the revoke was for
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  waitIdle(lock, [] { return true; });
  // Quiesced: NCCL's callers poll ncclCommGetAsyncError until it says ncclSuccess, then shrink.
  asyncError_ = ncclSuccess;
  deviceWork_.reset();
  lock.unlock();  // Done takes it
}

void ncclComm::finalize() {
  waitUntilConnected();
  collectives_->drain();
  collectives_->synchronize();  // calls on GPU memory finished too (raises a kernel's failure)
  communicator_->bootstrap().barrier();  // no rank frees memory a peer may still read
  finalized_ = true;
}

void ncclComm::setBackground(std::shared_ptr<forestcc::nccl::Background> group) {
  std::lock_guard<std::mutex> lock(mu_);
  background_ = std::move(group);
  everBackground_.store(true, std::memory_order_release);
}

void ncclComm::waitForBackground() {
  if (!everBackground_.load(std::memory_order_acquire)) return;
  std::shared_ptr<forestcc::nccl::Background> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group = background_;
  }
  if (group) group->wait();
}

ncclResult_t ncclComm::asyncError() {
  std::shared_ptr<forestcc::Work> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (background_ && !background_->ended()) return ncclInProgress;
    if (asyncError_ == ncclSuccess && !revoked_) work = deviceWork_;
  }
  // Outside mu_: the poll reaps the runner's finished calls (its own lock) and may poison the
  // communicator. It never blocks: an unfinished call reads as no error yet.
  if (work && work->completed()) {
    std::string failure;
    ncclResult_t result = ncclSuccess;
    try {
      work->wait();  // finished: rethrows its error, if any, at once
    } catch (const forestcc::Error& e) {
      result = forestcc::nccl::resultOf(e.code());
      failure = e.what();
    } catch (const std::exception& e) {
      result = ncclUnhandledCudaError;
      failure = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (deviceWork_ == work) deviceWork_.reset();
    if (result != ncclSuccess && asyncError_ == ncclSuccess) {
      asyncError_ = result;
      lastError_ = "a call on GPU memory failed: " + failure;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (asyncError_ == ncclSuccess && communicator_ && !revoked_) {  // a revoked one is poisoned on purpose
    try {
      communicator_->checkHealthy();
    } catch (const forestcc::Error& e) {
      asyncError_ = ncclRemoteError;
      lastError_ = std::string("a peer failed: ") + e.what();
    }
  }
  return asyncError_;
}

void ncclComm::noteDeviceWork(std::shared_ptr<forestcc::Work> work) {
  std::lock_guard<std::mutex> lock(mu_);
  deviceWork_ = std::move(work);
}

void ncclComm::noteError(ncclResult_t result, const std::string& text, bool sticky) {
  std::lock_guard<std::mutex> lock(mu_);
  lastError_ = text;
  if (sticky && (asyncError_ == ncclSuccess || asyncError_ == ncclInProgress)) asyncError_ = result;
}

std::string ncclComm::lastError() {
  std::lock_guard<std::mutex> lock(mu_);
  return lastError_;
}
