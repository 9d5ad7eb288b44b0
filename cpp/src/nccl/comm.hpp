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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/memory.hpp"
#include "nccl/include/nccl.h"
#include "nccl/comm_config.hpp"
#include "nccl/device_scratch.hpp"
#include "nccl/red_ops.hpp"

namespace forestcc::nccl {
struct PairedComm;

// A group of a non-blocking communicator (config.blocking = 0) running natively on a thread of
// its own (a call thread, call_threads.hpp; groups.cpp, launch): ncclCommGetAsyncError of each of
// its communicators says ncclInProgress until it ended. Owned by those communicators; the last
// one to let go waits for it to end.
class Background {
 public:
  ~Background();
  // Holds every member (ncclComm::Hold), runs `work` on a thread of its own, lets the members go,
  // then marks the group ended. When no thread can be started it throws, the group marked ended.
  void start(const std::vector<ncclComm*>& members, std::function<void()> work);
  bool ended();
  void wait();                      // until ended (at once on the group's own thread)
  static bool onThisThread(const Background* b);
  // ncclCommAbort of one member while the group runs: the group's call ends on every member (as
  // NCCL aborts a group's job as a whole), each member's communicator poisoned with `reason`.
  void abortMembers(const ncclComm* caller, const std::string& reason);
  // Whether this thread runs a group some member of which was aborted (its later Uses refuse).
  static bool abortedHere();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;  // start() ran (a group never started is not waited for)
  bool ended_ = false;
  std::atomic<bool> aborted_{false};
  std::vector<ncclComm*> members_;            // guarded by mu_; emptied before the holds go
  std::vector<std::shared_ptr<void>> holds_;  // an ncclComm::Hold of each member
};
}  // namespace forestcc::nccl

struct ncclComm {
  ncclComm(int rank, int size, forestcc::nccl::CommConfig config);
  ~ncclComm();
  // Whether `comm` is a communicator made here and not destroyed yet: every entry point asks
  // before it touches one (guarded), so a handle used after ncclCommDestroy or ncclCommAbort gets
  // ncclInvalidArgument, not a call on freed memory. (A new communicator may take a freed one's
  // address; that reuse is not told apart.)
  static bool live(const ncclComm* comm);

  // Set when it is made; a split's, shrink's or grow's made in a group or in the background has
  // -1 and 0 until its agreement placed it, before its state leaves ncclInProgress
  // (from_parent.cpp). Atomic: the agreement's thread sets them while the program may ask
  // (ncclCommCount refuses until then).
  std::atomic<int> rank;
  std::atomic<int> size;
  bool pending() const { return size.load() <= 0; }
  const forestcc::nccl::CommConfig config;

  // Joins the job: runs `connect` now (blocking config) or on a thread (non-blocking: the caller
  // polls ncclCommGetAsyncError, which says ncclInProgress until it is done). `call` (a string
  // literal) names the call that made it in a failure's message.
  ncclResult_t start(std::function<void(ncclComm&)> connect, const char* call = "ncclCommInitRank");
  // An init inside ncclGroupStart/End (NCCL's single-thread multi-rank init): `connect` waits
  // for ncclGroupEnd, which starts every deferred init of the group at once (startDeferred) and
  // waits for those of blocking configs (finishStart, their result).
  void defer(std::function<void(ncclComm&)> connect, const char* call = "ncclCommInitRank");
  // Its state is ncclInProgress until start() (a split waiting for its agreement).
  void markPending();
  void startDeferred();
  ncclResult_t finishStart();
  void attach(std::shared_ptr<forestcc::Communicator> communicator);  // called by `connect`
  // Set by ncclCommAbort: the bootstrap `connect` makes ends its waits (a non-blocking init whose
  // peers never come is not waited out to FORESTCC_TIMEOUT).
  std::shared_ptr<const std::atomic<bool>> connectCancel() const { return cancelConnecting_; }
  // Poisons the forestcc communicator, once it is attached (a group's abort, Background).
  void poison(const std::string& reason);

  // Whether a call takes a revoked communicator (ncclCommRevoke): only Split, Shrink and Destroy do.
  enum class Revoked { Refused, Taken };

  // Held by every call that uses the communicator; throws when it is aborted, revoked (unless
  // `revoked` says the call takes it) or not ready.
  class Use {
   public:
    Use(ncclComm* comm, const char* call, Revoked revoked = Revoked::Refused);
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
  // ncclCommRevoke: poisons the communicator (calls in flight fail at once), waits until no call
  // is inside it, and leaves it quiesced: ncclCommGetAsyncError says ncclSuccess, new operations
  // are refused, Split, Shrink and Destroy still work. Safe from any thread.
  void revoke(const std::string& reason);
  // Waits for queued work (on the GPU too), for a non-blocking init to end, then for every rank.
  void finalize();
  bool finalized() const { return finalized_; }

  // The group now running for this communicator on a Background (non-blocking config): every
  // later call waits for it (a Use), and asyncError says ncclInProgress until it ended.
  void setBackground(std::shared_ptr<forestcc::nccl::Background> group);
  void waitForBackground();

  ncclResult_t asyncError();
  // The last call enqueued on GPU memory (calls of a communicator finish in order): asyncError
  // polls it, without blocking, so that a kernel's failure shows there as NCCL's asynchronous
  // errors do.
  void noteDeviceWork(std::shared_ptr<forestcc::Work> work);
  void noteError(ncclResult_t result, const std::string& text, bool sticky);
  std::string lastError();

  forestcc::nccl::RedOpTable redOps;
  std::map<void*, size_t> registrations;  // ncclCommRegister handles: the buffer and its size
  std::mutex registrationsMutex;
  std::unique_ptr<forestcc::nccl::PairedComm> paired;  // the fallback's communicator, when forwarding
  int device = -1;  // ncclCommCuDevice: the CUDA device at init, -1 without CUDA
  // GPU memory lent to calls on GPU memory (device_scratch.hpp): a Reduce's output away from the
  // root or an in-place form's staged buffer, a PreMulSum's scaled input.
  forestcc::nccl::DeviceScratch lentDevice, premulScratch;
  // Its host counterpart for calls on host memory (execute.cpp, lent): forestcc shared memory, so
  // that it never changes what a call's memory kind is (the plan choice counts shared and private
  // memory apart, and every rank must choose alike). Grown, never shrunk.
  std::unique_ptr<forestcc::SharedAllocation> lentHost;
  // The stream of the last call on GPU memory that ran natively (none yet: no value). A copy the
  // shim enqueues itself before a call (execute.cpp, stagedCopy) is ordered after the previous
  // call only on that stream; forestcc orders calls across streams from inside the call.
  std::optional<void*> lastDeviceStream;
  bool suspended = false;  // ncclCommSuspend (reported by ncclCommMemStats)
  uint64_t splits = 0;   // ncclCommSplit calls so far (tags their messages)
  // ncclCommGetUniqueId's invitation for the next ncclCommGrow, on the rank that made it (grow.cpp).
  std::optional<forestcc::UniqueId> growInvitation;

 private:
  void waitUntilConnected();
  // A call enters (Use, Hold) and leaves; abort and revoke wait until none is inside (waitIdle).
  // Lock-free unless someone waits: every NCCL call does this twice.
  void enter() { inside_.fetch_add(1); }
  void leave();
  // Under `lock` (of mu_): until no call is inside and `also()` holds.
  void waitIdle(std::unique_lock<std::mutex>& lock, const std::function<bool()>& also);
  // abort's and revoke's first step: a non-blocking group call on several communicators that is
  // still running ends on all of them; returns the group (null: none).
  std::shared_ptr<forestcc::nccl::Background> endRunningGroup(const std::string& reason);
  // Joins the connecting thread; safe from several threads at once (a Use on a group's thread and
  // ncclCommAbort on the user's), a no-op on that thread itself.
  void joinConnecting();
  // Runs `connect`, records the result (named by `call`).
  std::function<void()> connector(std::function<void(ncclComm&)> connect, const char* call);
  void connectOnThread(std::function<void()> run);

  std::function<void()> deferred_;  // a deferred init's connector, until ncclGroupEnd

  // Shared with the bootstrap, which a Communicator::State held elsewhere may keep past this.
  std::shared_ptr<std::atomic<bool>> cancelConnecting_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<forestcc::Communicator> communicator_;
  std::unique_ptr<forestcc::Collectives> collectives_;
  std::mutex connectingMu_;  // held while connecting_ is started or joined
  std::thread connecting_;
  std::atomic<bool> attached_{false};  // communicator_ and collectives_ are set
  std::shared_ptr<forestcc::nccl::Background> background_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};
  std::atomic<bool> finalized_{false};  // set by a non-blocking finalize on its thread

  std::mutex mu_;
  std::condition_variable idle_;
  std::atomic<int> inside_{0};         // calls holding a Use or a Hold
  std::atomic<int> idleWaiters_{0};    // threads in waitIdle (leave() then notifies idle_)
  // waitUntilConnected saw it connected, after joining the connecting thread: later calls skip that.
  std::atomic<bool> connected_{false};
  // setBackground was called: a communicator whose calls never ran in the background (every
  // blocking one) has nothing for waitForBackground to wait for.
  std::atomic<bool> everBackground_{false};
  int revoking_ = 0;                   // ncclCommRevoke calls running (abort waits for them too)
  ncclResult_t asyncError_ = ncclSuccess;
  std::string lastError_;
  std::shared_ptr<forestcc::Work> deviceWork_;  // guarded by mu_
};
