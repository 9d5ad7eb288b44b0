// The shim communicator's lifetime: connecting (blocking or on a thread), the calls inside it,
// abort, finalize, and its errors.
#include "nccl/comm.hpp"

#include "forestcc/error.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::NcclError;

namespace forestcc::nccl {

namespace {
thread_local const Background* runningBackground = nullptr;  // the group this thread runs, if any
}

Background::~Background() {
  if (thread_.joinable()) thread_.join();
}

void Background::start(std::function<void()> work) {
  thread_ = std::thread([this, work = std::move(work)]() mutable {
    runningBackground = this;
    {
      // What the work holds (the communicators' Holds) goes before the group counts as ended:
      // a waiter may free a communicator as soon as it has.
      std::function<void()> body = std::move(work);
      body();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  });
}

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

ncclComm::ncclComm(int r, int n, forestcc::nccl::CommConfig c) : rank(r), size(n), config(std::move(c)) {}

ncclComm::~ncclComm() {
  if (connecting_.joinable()) connecting_.join();
  waitForBackground();
  background_.reset();
  for (auto& r : registrations) delete static_cast<char*>(r.first);
  paired.reset();  // before the forestcc communicator whose bootstrap it was paired over
  collectives_.reset();
  communicator_.reset();
}

void ncclComm::attach(std::shared_ptr<forestcc::Communicator> communicator) {
  communicator_ = std::move(communicator);
  collectives_ = std::make_unique<forestcc::Collectives>(communicator_);
}

std::function<void()> ncclComm::connector(std::function<void(ncclComm&)> connect) {
  return [this, connect] {
    ncclResult_t result = forestcc::nccl::guarded(this, "ncclCommInitRank", [&] {
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
  connecting_ = std::thread(std::move(run));
}

ncclResult_t ncclComm::start(std::function<void(ncclComm&)> connect) {
  if (config.blocking) {
    connector(std::move(connect))();
    std::lock_guard<std::mutex> lock(mu_);
    return asyncError_;
  }
  connectOnThread(connector(std::move(connect)));
  return ncclInProgress;
}

void ncclComm::defer(std::function<void(ncclComm&)> connect) {
  deferred_ = connector(std::move(connect));
  std::lock_guard<std::mutex> lock(mu_);
  asyncError_ = ncclInProgress;
}

void ncclComm::startDeferred() {
  if (deferred_) connectOnThread(std::move(deferred_));
  deferred_ = nullptr;
}

ncclResult_t ncclComm::finishStart() {
  if (connecting_.joinable()) connecting_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return asyncError_;
}

void ncclComm::waitUntilConnected() {
  if (connecting_.joinable() && connecting_.get_id() != std::this_thread::get_id()) connecting_.join();
  if (!collectives_) {
    std::lock_guard<std::mutex> lock(mu_);
    throw NcclError(ncclInvalidUsage, "the communicator failed to initialise: " + lastError_);
  }
}

ncclComm::Use::Use(ncclComm* comm, const char* call) : comm_(comm) {
  if (!comm) forestcc::nccl::badArgument(std::string(call) + ": comm is NULL");
  if (comm->aborted_) forestcc::nccl::refuse("the communicator was aborted (ncclCommAbort)");
  if (comm->finalized_) forestcc::nccl::refuse("the communicator was finalized (ncclCommFinalize)");
  {
    std::lock_guard<std::mutex> lock(comm->mu_);
    ++comm->inside_;
  }
  try {
    comm->waitForBackground();  // the call before this one (non-blocking config)
    if (comm->aborted_) forestcc::nccl::refuse("the communicator was aborted (ncclCommAbort)");
    if (comm->finalized_) forestcc::nccl::refuse("the communicator was finalized (ncclCommFinalize)");
    comm->waitUntilConnected();
  } catch (...) {
    std::lock_guard<std::mutex> lock(comm->mu_);
    if (--comm->inside_ == 0) comm->idle_.notify_all();
    throw;
  }
}

ncclComm::Use::~Use() {
  std::lock_guard<std::mutex> lock(comm_->mu_);
  if (--comm_->inside_ == 0) comm_->idle_.notify_all();
}

ncclComm::Hold::Hold(ncclComm* comm) : comm_(comm) {
  if (!comm_) return;
  std::lock_guard<std::mutex> lock(comm_->mu_);
  ++comm_->inside_;
}

ncclComm::Hold::~Hold() {
  if (!comm_) return;
  std::lock_guard<std::mutex> lock(comm_->mu_);
  if (--comm_->inside_ == 0) comm_->idle_.notify_all();
}

void ncclComm::abort(const std::string& reason) {
  aborted_ = true;
  if (connecting_.joinable()) connecting_.join();  // a rendezvous in progress ends by itself (deadline)
  if (communicator_) communicator_->abort(reason);
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return inside_ == 0; });
}

void ncclComm::finalize() {
  waitUntilConnected();
  collectives_->drain();
  communicator_->bootstrap().barrier();  // no rank frees memory a peer may still read
  finalized_ = true;
}

void ncclComm::setBackground(std::shared_ptr<forestcc::nccl::Background> group) {
  std::lock_guard<std::mutex> lock(mu_);
  background_ = std::move(group);
}

void ncclComm::waitForBackground() {
  std::shared_ptr<forestcc::nccl::Background> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group = background_;
  }
  if (group) group->wait();
}

ncclResult_t ncclComm::asyncError() {
  std::lock_guard<std::mutex> lock(mu_);
  if (background_ && !background_->ended()) return ncclInProgress;
  if (asyncError_ == ncclSuccess && communicator_) {
    try {
      communicator_->checkHealthy();
    } catch (const forestcc::Error& e) {
      asyncError_ = ncclRemoteError;
      lastError_ = std::string("a peer failed: ") + e.what();
    }
  }
  return asyncError_;
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
