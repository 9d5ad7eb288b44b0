// The rest of a communicator's life: queries, ncclCommGetAsyncError, ncclCommFinalize,
// ncclCommDestroy, ncclCommRevoke and ncclCommAbort (the last two safe from another thread: the
// calls waiting inside the communicator fail at once, and it is freed only after they have left).
#include <string>

#include "nccl/comm.hpp"
#include "nccl/groups.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guarded(comm, "ncclCommCount", [&] {
    if (!comm) badArgument("comm is NULL");
    if (!count) badArgument("count is NULL");
    if (comm->pending()) badArgument(forestcc::nccl::kStillBeingMade);
    *count = comm->size;
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded(comm, "ncclCommUserRank", [&] {
    if (!comm) badArgument("comm is NULL");
    if (!rank) badArgument("rank is NULL");
    if (comm->pending()) badArgument(forestcc::nccl::kStillBeingMade);
    *rank = comm->rank;
    return ncclSuccess;
  });
}

// The CUDA device current when the communicator was made; -1 when the process had no CUDA (a
// host-memory communicator), never the rank.
extern "C" ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded(comm, "ncclCommCuDevice", [&] {
    if (!comm) badArgument("comm is NULL");
    if (!device) badArgument("device is NULL");
    *device = comm->device;
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded(comm, "ncclCommGetAsyncError", [&] {
    if (!comm) badArgument("comm is NULL");
    if (!asyncError) badArgument("asyncError is NULL");
    *asyncError = comm->asyncError();
    return ncclSuccess;
  });
}

// Collective: waits for this rank's queued work and for every rank, so that no rank frees memory
// a peer may still read. A non-blocking communicator does that in the background (ncclInProgress).
extern "C" ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded(comm, "ncclCommFinalize", [&] {
    auto finalize = [comm] {
      ncclComm::Use use(comm, "ncclCommFinalize");
      comm->finalize();
    };
    if (comm && !comm->config.blocking) return forestcc::nccl::runInBackground({comm}, "ncclCommFinalize", finalize);
    finalize();
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommDestroy", [&] {
    if (!comm) return ncclSuccess;  // NCCL accepts NULL
    if (!ncclComm::live(comm)) badArgument(forestcc::nccl::notLive(comm));  // destroyed twice, say
    if (!comm->finalized() && !comm->aborted()) {
      try {
        ncclComm::Use use(comm, "ncclCommDestroy", ncclComm::Revoked::Taken);
        comm->collectives().drain();
      } catch (...) {
        // A communicator that failed is still freed; its error was reported where it happened.
      }
    }
    delete comm;
    return ncclSuccess;
  });
}

// Quiesces the communicator for a shrink (NCCL's fault-tolerance path: revoke, poll
// ncclCommGetAsyncError until ncclSuccess, shrink): calls in flight fail at once, here and on the
// peers' calls that wait for this rank; not called from inside a call of the communicator.
extern "C" ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded(nullptr, "ncclCommRevoke", [&] {
    if (!comm) badArgument("comm is NULL");
    if (!ncclComm::live(comm)) badArgument(forestcc::nccl::notLive(comm));
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
      badArgument("revokeFlags is " + std::to_string(revokeFlags) + "; expected NCCL_REVOKE_DEFAULT (0)");
    if (comm->aborted()) forestcc::nccl::refuse("the communicator was aborted (ncclCommAbort)");
    comm->revoke("ncclCommRevoke was called on rank " + std::to_string(comm->rank));
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommAbort", [&] {
    if (!comm) return ncclSuccess;
    if (!ncclComm::live(comm)) badArgument(forestcc::nccl::notLive(comm));
    comm->abort("ncclCommAbort was called on rank " + std::to_string(comm->rank));
    delete comm;
    return ncclSuccess;
  });
}
