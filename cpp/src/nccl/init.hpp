// Making a shim communicator, shared by the calls that make one (init.cpp: InitRank, InitAll,
// Split; shrink.cpp: Shrink; grow.cpp: Grow): an ncclUniqueId carries forestcc's bootstrap id.
#pragma once

#include "forestcc/bootstrap.hpp"
#include "nccl/comm.hpp"
#include "nccl/comm_config.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

forestcc::UniqueId toForestcc(const ncclUniqueId& id);

// Refuses (ncclInvalidArgument) an nranks below 1 or a rank outside 0..nranks-1.
void checkRanks(int nranks, int rank);

// Makes the shim communicator and starts joining the job described by `id` as `rank` of `nranks`
// (on a thread when the config is non-blocking; deferred to ncclGroupEnd inside a group). On a
// blocking failure nothing is returned to the caller (*out stays as it was) and the error is recorded.
ncclResult_t initRank(ncclComm_t* out, int nranks, const forestcc::UniqueId& id, int rank, const CommConfig& config,
                      int device);

}  // namespace forestcc::nccl
