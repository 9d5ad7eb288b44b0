// ncclGroupStart/End and how operations run. Calls made inside a group are kept (after their
// arguments are checked) and run at the outermost ncclGroupEnd, all natively or all through the
// fallback NCCL: a group is never split between the two libraries. Natively, each communicator's
// collectives run in call order, then its sends and receives as one batch (runPointToPoint);
// communicators of one group run on threads of their own, so operations on
// several communicators of this process (ncclCommInitAll) progress together.
#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/on_error.hpp"
#include "nccl/call_threads.hpp"
#include "nccl/comm.hpp"
#include "nccl/cuda_driver.hpp"
#include "nccl/data_types.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/groups.hpp"
#include "nccl/operation.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<Operation> operations;
  std::string failure;  // the first call of the group that was refused: the group runs nothing
  std::vector<Operation> refused;  // the group's refused calls (refuseOperations)
  std::vector<ncclComm*> inits;  // communicators whose init waits for the group's end
  struct Task {
    ncclComm* parent;
    ncclComm* made;
    bool blocking;  // the call's config
    std::function<ncclResult_t()> run;
  };
  std::vector<Task> tasks;  // deferTask
};
thread_local GroupState group;

// One deferred task: its result, a failure of it also its new communicator's state; `why` (may be
// null) gets a failure's text (the process-wide last error may be another thread's by then).
ncclResult_t runDeferredTask(const GroupState::Task& t, std::string* why = nullptr) {
  std::string text;
  const ncclResult_t r = guarded(t.made, "ncclGroupEnd", [&] {
    try {
      return t.run();
    } catch (const std::exception& e) {
      text = std::string("ncclGroupEnd: ") + e.what();
      throw;
    }
  });
  if (r == ncclSuccess || r == ncclInProgress) return r;
  if (t.made) {
    if (text.empty()) text = t.made->lastError();  // a join that failed recorded it there
    t.made->noteError(r, text, true);
  }
  if (why) *why = text;
  return r;
}

// A non-blocking parent's tasks, all non-blocking: in the background (runInBackground, the new
// communicators following it), so ncclGroupEnd need not wait for the other ranks. Throws what
// runInBackground throws (nothing then ran).
void runTasksInBackground(ncclComm* parent, const std::vector<GroupState::Task>& mine) {
  std::vector<ncclComm*> made;
  for (const GroupState::Task& t : mine)
    if (t.made) made.push_back(t.made);
  runInBackground({parent}, "ncclGroupEnd", [mine] {
    ncclResult_t first = ncclSuccess;
    std::string why;
    for (const GroupState::Task& t : mine) {
      std::string text;
      const ncclResult_t r = runDeferredTask(t, &text);  // ncclInProgress: the new one joins on its thread
      if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) first = r, why = text;
    }
    if (first != ncclSuccess) throw NcclError(first, why);
  }, made);
}

// The group's deferred inits, all at once (each waits for the others' ranks): the first failure
// of a blocking one, or ncclInProgress when a non-blocking one is still connecting.
ncclResult_t startDeferredInits() {
  std::vector<ncclComm*> inits;
  inits.swap(group.inits);
  std::vector<GroupState::Task> tasks;
  tasks.swap(group.tasks);
  for (ncclComm* c : inits) c->startDeferred();
  ncclResult_t result = ncclSuccess;
  bool inProgress = false;
  // One thread per parent communicator, its tasks in call order (two splits of one parent use its
  // bootstrap one after the other, as every rank does); the parents' threads at once.
  std::vector<ncclComm*> parents;
  for (const GroupState::Task& t : tasks)
    if (std::find(parents.begin(), parents.end(), t.parent) == parents.end()) parents.push_back(t.parent);
  std::vector<ncclResult_t> done(tasks.size(), ncclSuccess);
  auto runParent = [&](ncclComm* parent) {
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].parent == parent) done[i] = runDeferredTask(tasks[i]);
  };
  // Parents whose tasks are waited for here; the others' run in the background (ncclGroupEnd
  // then says ncclInProgress).
  std::vector<ncclComm*> waited;
  for (ncclComm* parent : parents) {
    std::vector<GroupState::Task> mine;
    bool nonBlocking = !parent->config.blocking;
    for (const GroupState::Task& t : tasks)
      if (t.parent == parent) {
        mine.push_back(t);
        nonBlocking = nonBlocking && !t.blocking;
      }
    if (!nonBlocking) {
      waited.push_back(parent);
      continue;
    }
    try {
      runTasksInBackground(parent, mine);
      inProgress = true;
    } catch (const std::exception& e) {
      for (size_t i = 0; i < tasks.size(); ++i)
        if (tasks[i].parent == parent) {
          done[i] = resultOf(e);
          if (tasks[i].made) tasks[i].made->noteError(done[i], std::string("ncclGroupEnd: ") + e.what(), true);
        }
    }
  }
  parents.swap(waited);
  size_t started = 0;
  try {
    runAtOnce(parents.size(), [&](size_t i) { runParent(parents[i]); }, &started);
  } catch (const std::system_error& e) {
    // No thread for the rest: they fail rather than wait for peers that may be this thread's.
    for (size_t i = 0; i < tasks.size(); ++i)
      if (std::find(parents.begin() + started, parents.end(), tasks[i].parent) != parents.end()) {
        done[i] = ncclSystemError;
        if (tasks[i].made)
          tasks[i].made->noteError(ncclSystemError, std::string("ncclGroupEnd: could not start a thread: ") + e.what(), true);
      }
  }
  for (ncclResult_t r : done) {
    if (r == ncclInProgress) inProgress = true;
    else if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  for (ncclComm* c : inits) {
    if (!c->config.blocking) {
      inProgress = true;
      continue;
    }
    const ncclResult_t r = c->finishStart();
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result == ncclSuccess && inProgress ? ncclInProgress : result;
}

// The device of a share's GPU buffers (checkOperation: one per communicator), -1 for host memory.
int deviceOf(const std::vector<const Operation*>& ops) {
  for (const Operation* op : ops)
    if (op->device >= 0) return op->device;
  return -1;
}

// One communicator's share of a group, on this thread (on its buffers' device).
void runOnComm(ncclComm& comm, const std::vector<const Operation*>& ops) {
  std::vector<const Operation*> collectives, p2p;
  for (const Operation* op : ops) (pointToPoint(op->kind) ? p2p : collectives).push_back(op);
  // A failure leaves the rest of the share unrun: each call still takes its place, refused, so
  // peers that run them raise instead of meeting this rank's next calls. (The call that failed
  // refused itself, or failed on every rank: a failure after its number poisons.)
  size_t next = 0;  // the first collective not started
  OnError refuseRest([&] {
    for (size_t i = next; i < collectives.size(); ++i) comm.collectives().refuseCall();
    if (!p2p.empty()) refusePointToPoint(comm, p2p);
  });
  cuda::OnDevice on(deviceOf(ops));
  while (next < collectives.size()) runNativelyOrRefuse(*collectives[next++]);
  refuseRest.dismiss();  // the batch refuses its own failures
  if (!p2p.empty()) runPointToPoint(comm, p2p);
}

void runEachComm(const std::vector<ncclComm*>& comms, std::map<ncclComm*, std::vector<const Operation*>>& byComm);

void runGroup(const std::vector<Operation>& ops) {
  if (ops.empty()) return;
  std::string why;
  for (const Operation& op : ops) {
    if (mustForward(op, &why)) return forwardGroup(ops, op, why);
  }
  // Every communicator of the group learns of a failure (ncclCommGetAsyncError), while the Uses
  // still keep them alive.
  auto noteFailure = [](const std::vector<ncclComm*>& comms, const Error& e) {
    const bool argument = e.code() == ErrorCode::InvalidUsage || e.code() == ErrorCode::InvalidType;
    for (ncclComm* c : comms) c->noteError(resultOf(e.code()), std::string("ncclGroupEnd: ") + e.what(), !argument);
  };
  if (ops.size() == 1) {  // a call outside a group: the common case, without the bookkeeping below
    ncclComm::Use use(ops[0].comm, "ncclGroupEnd");
    try {
      return runNativelyOrRefuse(ops[0]);
    } catch (const Error& e) {
      noteFailure({ops[0].comm}, e);
      throw;
    }
  }
  // Split by communicator, keeping each one's call order.
  std::vector<ncclComm*> comms;
  std::map<ncclComm*, std::vector<const Operation*>> byComm;
  for (const Operation& op : ops) {
    auto& list = byComm[op.comm];
    if (list.empty()) comms.push_back(op.comm);
    list.push_back(&op);
  }
  std::vector<std::unique_ptr<ncclComm::Use>> uses;
  for (ncclComm* c : comms) uses.push_back(std::make_unique<ncclComm::Use>(c, "ncclGroupEnd"));
  try {
    runEachComm(comms, byComm);
  } catch (const Error& e) {
    noteFailure(comms, e);
    throw;
  }
}

void runEachComm(const std::vector<ncclComm*>& comms,
                 std::map<ncclComm*, std::vector<const Operation*>>& byComm) {
  if (comms.size() == 1) return runOnComm(*comms[0], byComm[comms[0]]);

  std::vector<std::exception_ptr> errors(comms.size());
  runAtOnce(comms.size(), [&](size_t i) {
    try {
      runOnComm(*comms[i], byComm.at(comms[i]));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs a group now, or (every communicator of it non-blocking, nothing forwarded) in the
// background (runInBackground), returning ncclInProgress.
ncclResult_t launch(std::vector<Operation> ops, const char* call) {
  if (ops.empty()) return ncclSuccess;
  try {
    checkBatches(ops);  // refused by the call itself, also where the group would run in the background
  } catch (...) {
    refuseOperations(ops);
    throw;
  }
  bool allNonBlocking = true;
  for (const Operation& op : ops) {
    allNonBlocking = allNonBlocking && !op.comm->config.blocking;
    std::string why;
    if (allNonBlocking && mustForward(op, &why)) allNonBlocking = false;  // the fallback has its own non-blocking calls
  }
  if (!allNonBlocking) {
    runGroup(ops);
    return ncclSuccess;
  }
  std::vector<ncclComm*> comms;
  for (const Operation& op : ops)
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  return runInBackground(comms, call, [ops = std::move(ops)] { runGroup(ops); });
}

}  // namespace

ncclResult_t runInBackground(const std::vector<ncclComm*>& comms, const char* call, std::function<void()> work,
                             const std::vector<ncclComm*>& followers) {
  // The previous call of these communicators ends first (NCCL asks callers to poll it to the end
  // before the next call; one who does not gets this call after it, not beside it).
  for (ncclComm* c : comms) c->waitForBackground();
  auto background = std::make_shared<Background>();
  for (ncclComm* c : comms) c->setBackground(background);
  for (ncclComm* c : followers) c->setBackground(background);
  // Every failure stays, refused arguments found while running included (a point-to-point size
  // mismatch): ncclCommGetAsyncError is where a non-blocking call's result is read, and a state
  // that went back to ncclSuccess would read as a call that worked. (Arguments the call checks
  // before it returns are returned by it and do not count.)
  background->start(comms, [work = std::move(work), comms, call] {
    auto note = [&](ncclResult_t result, const std::string& what) {
      for (ncclComm* c : comms) c->noteError(result, std::string(call) + ": " + what, true);
    };
    try {
      work();
    } catch (const std::exception& e) {
      note(resultOf(e), e.what());
    } catch (...) {
      note(ncclInternalError, "failed with an exception that is not a std::exception");
    }
  });
  return ncclInProgress;
}

void refuseOperations(const std::vector<Operation>& ops) {
  std::vector<ncclComm*> comms;
  for (const Operation& op : ops) {
    ncclComm* c = op.comm;
    if (c && !c->finalized() && !c->pending() && std::find(comms.begin(), comms.end(), c) == comms.end())
      comms.push_back(c);
  }
  for (ncclComm* c : comms) {
    bool collective = false;
    std::vector<const Operation*> p2p;
    for (const Operation& op : ops)
      if (op.comm == c) {
        if (pointToPoint(op.kind)) p2p.push_back(&op);
        else collective = true;
      }
    try {
      // As a call: after the communicator's call in the background (non-blocking config), once
      // it is connected, and held meanwhile.
      ncclComm::Use use(c, "a refused call");
      if (collective) c->collectives().refuseCall();
      if (!p2p.empty()) refusePointToPoint(*c, p2p);
    } catch (...) {
      // Not usable (aborted, finalized, its init failed): none of its calls runs or is waited for.
    }
  }
}

bool insideGroup() { return group.depth > 0; }

void deferInit(ncclComm* comm) { group.inits.push_back(comm); }

void deferTask(ncclComm* parent, ncclComm* made, bool blocking, std::function<ncclResult_t()> task) {
  group.tasks.push_back({parent, made, blocking, std::move(task)});
}

ncclResult_t submit(Operation op, const char* call) {
  try {
    op.device = checkOperation(op, call);
  } catch (const std::exception& e) {
    if (group.depth > 0) {
      if (group.failure.empty()) group.failure = std::string(call) + ": " + e.what();
      group.refused.push_back(op);  // refused with the rest of the group at its end
    } else {
      refuseOperations({op});
    }
    throw;
  }
  if (group.depth > 0) {
    group.operations.push_back(op);
    return ncclSuccess;
  }
  return launch({op}, call);
}

}  // namespace forestcc::nccl

using forestcc::nccl::group;

extern "C" ncclResult_t ncclGroupStart(void) {
  ++group.depth;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void) {
  return forestcc::nccl::guarded(nullptr, "ncclGroupEnd", [&] {
    if (group.depth == 0) forestcc::nccl::refuse("called without a matching ncclGroupStart");
    if (--group.depth > 0) return ncclSuccess;
    std::vector<forestcc::nccl::Operation> ops;
    ops.swap(group.operations);
    std::string failure;
    failure.swap(group.failure);
    std::vector<forestcc::nccl::Operation> refused;
    refused.swap(group.refused);
    // Inits first, whatever else the group holds: a communicator never stays half made.
    const ncclResult_t inits = forestcc::nccl::startDeferredInits();
    // The group's operations do not run here: each communicator with a collective among them
    // refuses a call, and their sends and receives take their places refused.
    if (!failure.empty() || (inits != ncclSuccess && inits != ncclInProgress)) {
      refused.insert(refused.end(), ops.begin(), ops.end());
      forestcc::nccl::refuseOperations(refused);
    }
    if (!failure.empty())
      forestcc::nccl::refuse("the group ran none of its " + std::to_string(ops.size()) +
                             " operations because a call in it was refused (" + failure + ")");
    if (inits != ncclSuccess && inits != ncclInProgress) {
      if (ops.empty()) return inits;  // the init's own error is the last error already
      forestcc::nccl::refuse("the group ran none of its " + std::to_string(ops.size()) +
                             " operations because a communicator init in it failed");
    }
    const ncclResult_t ran = forestcc::nccl::launch(std::move(ops), "ncclGroupEnd");
    return ran == ncclSuccess ? inits : ran;
  });
}

// NCCL estimates a group's time without running it; forestcc has no time model for NCCL groups
// yet. The group is ended (its operations discarded, as a simulation leaves them) and refused.
extern "C" ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return forestcc::nccl::guarded(nullptr, "ncclGroupSimulateEnd", [&]() -> ncclResult_t {
    if (group.depth == 0) forestcc::nccl::refuse("called without a matching ncclGroupStart");
    if (--group.depth == 0) {
      group.operations.clear();
      group.failure.clear();
      group.refused.clear();  // nothing of a simulated group runs, refused or not
      forestcc::nccl::startDeferredInits();  // a communicator made in the group must not stay half made
    }
    if (simInfo) simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
    forestcc::nccl::refuse("forestcc cannot estimate the time of an NCCL group; the group was ended without "
                           "running (use forestcc plan simulate for forestcc's plans)");
  });
}
