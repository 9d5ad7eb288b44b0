// Making a shim communicator, shared by the calls that make one (init.cpp: InitRank, InitAll,
// Split; shrink.cpp: Shrink; grow.cpp: Grow): an ncclUniqueId carries forestcc's bootstrap id.
#pragma once

#include <functional>
#include <memory>

#include "forestcc/bootstrap.hpp"
#include "nccl/comm.hpp"
#include "nccl/comm_config.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

forestcc::UniqueId toForestcc(const ncclUniqueId& id);

// Refuses (ncclInvalidArgument) an nranks below 1 or a rank outside 0..nranks-1.
void checkRanks(int nranks, int rank);

// A shim communicator not joined yet (the CUDA driver looked for, the GPU kernels loaded for a
// device >= 0), and what joins it to the job `id` describes as `rank` of `nranks` (its connect).
std::unique_ptr<ncclComm> makeComm(int rank, int nranks, const CommConfig& config, int device);
std::function<void(ncclComm&)> joiner(const forestcc::UniqueId& id, int rank, int nranks);

// Makes the shim communicator and starts joining the job described by `id` as `rank` of `nranks`
// (on a thread when the config is non-blocking; deferred to ncclGroupEnd inside a group). On a
// blocking failure nothing is returned to the caller (*out stays as it was) and the error is
// recorded, named by `call` (a string literal).
ncclResult_t initRank(ncclComm_t* out, int nranks, const forestcc::UniqueId& id, int rank, const CommConfig& config,
                      int device, const char* call = "ncclCommInitRank");
// The same, joining by `connect` (a new rank of ncclCommGrow first asks its invitation for the id).
ncclResult_t initWith(ncclComm_t* out, int nranks, int rank, const CommConfig& config, int device,
                      std::function<void(ncclComm&)> connect, const char* call);

}  // namespace forestcc::nccl
