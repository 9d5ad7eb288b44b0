// What the rest of the shim asks of ncclGroupStart/End (groups.cpp): whether this thread is inside
// a group, the communicator inits that wait for its ncclGroupEnd, and how a non-blocking
// communicator's call runs in the background.
#pragma once

#include <functional>
#include <vector>

#include "nccl/comm.hpp"
#include "nccl/operation.hpp"

namespace forestcc::nccl {

bool insideGroup();
// `ops` do not run on this rank (a call of their group was refused): each communicator with a
// collective among them refuses a call (Collectives::refuseCall), so peers that entered it raise
// instead of meeting this rank's next collective, and their sends and receives take their places
// refused (refusePointToPoint).
void refuseOperations(const std::vector<Operation>& ops);
// Keeps `comm` (made with ncclComm::defer) for the outermost ncclGroupEnd of this thread.
void deferInit(ncclComm* comm);
// Keeps `task` (the agreement and join of a split, shrink or grow on `parent`: from_parent.hpp)
// for the outermost ncclGroupEnd of this thread, which runs the tasks of each parent in call order
// on a thread of their own, the parents at once (an agreement waits for the other ranks' calls,
// which may be this thread's too), and waits for them: their first failure is the group's. A
// non-blocking parent whose tasks are all non-blocking (`blocking`: the config of the call; a
// refused call's is the default, blocking, so that ncclGroupEnd returns its error) runs them in
// the background instead (ncclGroupEnd then says ncclInProgress). `made` (may be null) is the
// communicator the task makes: a failure of the task is its state too.
void deferTask(ncclComm* parent, ncclComm* made, bool blocking, std::function<ncclResult_t()> task);

// A call of non-blocking communicators: runs `work` on a Background after their previous one
// ended and returns ncclInProgress; ncclCommGetAsyncError of each says ncclInProgress until it
// ended, then its failure (named by `call`, a string literal), which stays (as NCCL's
// asynchronous errors do). `followers` wait for it too (their calls, ncclCommGetAsyncError and
// destruction) without being its members: no failure of it is theirs, and their ncclCommAbort
// does not end it (a split's new communicator, which the work makes).
ncclResult_t runInBackground(const std::vector<ncclComm*>& comms, const char* call, std::function<void()> work,
                             const std::vector<ncclComm*>& followers = {});

}  // namespace forestcc::nccl
