// Forwarding to a real NCCL library (FORESTCC_NCCL_FALLBACK; default: the nvidia-nccl wheel's
// libnccl.so.2 beside forestcc when it is installed) for what forestcc does not run natively:
// GPU buffers until forestcc's CUDA path exists, the calls of FORESTCC_NCCL_FORCE, and the NCCL
// APIs forestcc has no counterpart for (windows, signals, device communicators, ...).
//
// The library is loaded with RTLD_LOCAL | RTLD_DEEPBIND (it binds to its own symbols, not to the
// shim's). Each shim communicator is paired, when it is made, with a real one over forestcc's
// bootstrap; that happens when every rank has a fallback and either a CUDA device or a force list.
// Without one, a call that needs it returns ncclInvalidUsage with the reason: never a silent success.
#pragma once

#include <string>
#include <vector>

#include "nccl/include/nccl.h"
#include "nccl/operation.hpp"

struct ncclComm;

namespace forestcc::nccl {

// The real communicator paired with a shim communicator, or why there is none.
struct PairedComm {
  ncclComm_t real = nullptr;
  std::string unavailable;
  ~PairedComm();
};

// At init, collective over the communicator's ranks: fills comm.paired.
void pairWithFallback(ncclComm& comm);

// True when `op` must run in the fallback (a forced operation, GPU memory); `why` says which.
bool mustForward(const Operation& op, std::string* why);
// Runs the whole group in the fallback (ncclGroupStart, each call, ncclGroupEnd), or refuses it
// all, naming `trigger` and `why`, when a communicator of the group has no real twin.
void forwardGroup(const std::vector<Operation>& ops, const Operation& trigger, const std::string& why);

// The fallback's function `name` for a call forestcc has no counterpart of, with the real
// communicator of `comm` (null comm: calls that take none). Throws InvalidUsage with the reason
// when there is no fallback.
void* fallbackFunction(const char* name, ncclComm* comm, ncclComm_t* real);
// The same for calls that take no communicator.
void* fallbackFunction(const char* name);
// The fallback's ncclGetLastError(NULL), for messages.
std::string fallbackLastError();

}  // namespace forestcc::nccl
