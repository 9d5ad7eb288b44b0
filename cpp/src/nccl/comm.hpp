// The shim's communicator (what an ncclComm_t points to): a forestcc Communicator and its
// Collectives, the NCCL-visible state around them (async error, last error, reduction operators,
// registrations) and a count of the calls inside it, so that ncclCommAbort from another thread can
// poison it, wait for those calls to fail out, and only then free it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "nccl/include/nccl.h"
#include "nccl/comm_config.hpp"
#include "nccl/red_ops.hpp"

namespace forestcc::nccl {
struct PairedComm;

// A group of a non-blocking communicator (config.blocking = 0) running natively on a thread of
// its own (groups.cpp, launch): ncclCommGetAsyncError of each of its communicators says
// ncclInProgress until it ended. Owned by those communicators; the last one to let go joins it.
class Background {
 public:
  ~Background();
  void start(std::function<void()> work);  // runs `work`, then marks the group ended
  bool ended();
  void wait();                      // until ended (at once on the group's own thread)
  static bool onThisThread(const Background* b);

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ended_ = false;
};
}  // namespace forestcc::nccl

struct ncclComm {
  ncclComm(int rank, int size, forestcc::nccl::CommConfig config);
  ~ncclComm();

  const int rank;
  const int size;
  const forestcc::nccl::CommConfig config;

  // Joins the job: runs `connect` now (blocking config) or on a thread (non-blocking: the caller
  // polls ncclCommGetAsyncError, which says ncclInProgress until it is done).
  ncclResult_t start(std::function<void(ncclComm&)> connect);
  // An init inside ncclGroupStart/End (NCCL's single-thread multi-rank init): `connect` waits
  // for ncclGroupEnd, which starts every deferred init of the group at once (startDeferred) and
  // waits for those of blocking configs (finishStart, their result).
  void defer(std::function<void(ncclComm&)> connect);
  void startDeferred();
  ncclResult_t finishStart();
  void attach(std::shared_ptr<forestcc::Communicator> communicator);  // called by `connect`

  // Held by every call that uses the communicator; throws when it is aborted or not ready.
  class Use {
   public:
    Use(ncclComm* comm, const char* call);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    ncclComm* comm_;
  };

  // Keeps the communicator alive (ncclCommAbort from another thread waits for it) without the
  // checks of Use: held by every entry point around its body and its error reporting.
  class Hold {
   public:
    explicit Hold(ncclComm* comm);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    ncclComm* comm_;
  };

  forestcc::Collectives& collectives() { return *collectives_; }
  forestcc::Communicator& communicator() { return *communicator_; }

  // Poisons the communicator (every waiting call fails at once), then waits until no call is
  // inside it. Safe from any thread.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }
  // Waits for queued work, for a non-blocking init to end, then (finalize) for every rank.
  void finalize();
  bool finalized() const { return finalized_; }

  // The group now running for this communicator on a Background (non-blocking config): every
  // later call waits for it (a Use), and asyncError says ncclInProgress until it ended.
  void setBackground(std::shared_ptr<forestcc::nccl::Background> group);
  void waitForBackground();

  ncclResult_t asyncError();
  void noteError(ncclResult_t result, const std::string& text, bool sticky);
  std::string lastError();

  forestcc::nccl::RedOpTable redOps;
  std::map<void*, size_t> registrations;  // ncclCommRegister handles: the buffer and its size
  std::mutex registrationsMutex;
  std::unique_ptr<forestcc::nccl::PairedComm> paired;  // the fallback's communicator, when forwarding
  int device = -1;  // ncclCommCuDevice: the CUDA device at init, -1 without CUDA
  bool suspended = false;  // ncclCommSuspend (reported by ncclCommMemStats)
  uint64_t splits = 0;                                  // ncclCommSplit calls so far (tags their messages)

 private:
  void waitUntilConnected();
  std::function<void()> connector(std::function<void(ncclComm&)> connect);  // runs it, records the result
  void connectOnThread(std::function<void()> run);

  std::function<void()> deferred_;  // a deferred init's connector, until ncclGroupEnd

  std::shared_ptr<forestcc::Communicator> communicator_;
  std::unique_ptr<forestcc::Collectives> collectives_;
  std::thread connecting_;
  std::shared_ptr<forestcc::nccl::Background> background_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
  std::atomic<bool> finalized_{false};  // set by a non-blocking finalize on its thread

  std::mutex mu_;
  std::condition_variable idle_;
  int inside_ = 0;                     // calls holding a Use or a Hold
  ncclResult_t asyncError_ = ncclSuccess;
  std::string lastError_;
};
