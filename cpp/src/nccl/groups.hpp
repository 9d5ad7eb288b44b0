// What the rest of the shim asks of ncclGroupStart/End (groups.cpp): whether this thread is inside
// a group, and the communicator inits that wait for its ncclGroupEnd.
#pragma once

#include "nccl/comm.hpp"

namespace forestcc::nccl {

bool insideGroup();
// Keeps `comm` (made with ncclComm::defer) for the outermost ncclGroupEnd of this thread.
void deferInit(ncclComm* comm);

}  // namespace forestcc::nccl
