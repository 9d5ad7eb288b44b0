// What the rest of the shim asks of ncclGroupStart/End (groups.cpp): whether this thread is inside
// a group, the communicator inits that wait for its ncclGroupEnd, and how a non-blocking
// communicator's call runs in the background.
#pragma once

#include <functional>
#include <vector>

#include "nccl/comm.hpp"

namespace forestcc::nccl {

bool insideGroup();
// Keeps `comm` (made with ncclComm::defer) for the outermost ncclGroupEnd of this thread.
void deferInit(ncclComm* comm);
// Keeps `task` for the outermost ncclGroupEnd of this thread, which runs every task of the group
// at once, each on a thread (a split's agreement waits for the other ranks' splits, which may be
// this thread's too), and waits for them: their first failure is the group's. `made` (may be
// null) is the communicator the task makes: a failure of the task is its state too.
void deferTask(ncclComm* made, std::function<ncclResult_t()> task);

// A call of non-blocking communicators: runs `work` on a Background after their previous one
// ended and returns ncclInProgress; ncclCommGetAsyncError of each says ncclInProgress until it
// ended, then its failure (named by `call`, a string literal), which stays (as NCCL's
// asynchronous errors do).
ncclResult_t runInBackground(const std::vector<ncclComm*>& comms, const char* call, std::function<void()> work);

}  // namespace forestcc::nccl
