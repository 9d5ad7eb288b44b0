// ncclGetErrorString, ncclGetLastError and the recording of errors behind them.
#include "nccl/result.hpp"

#include <cstdio>
#include <mutex>

#include "nccl/comm.hpp"

namespace forestcc::nccl {

namespace {
std::mutex lastErrorMutex;
std::string lastError;  // of the whole process: ncclGetLastError(NULL)
}  // namespace

ncclResult_t resultOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage: return ncclInvalidUsage;
    case ErrorCode::InvalidType: return ncclInvalidArgument;
    case ErrorCode::System: return ncclSystemError;
    case ErrorCode::Remote: return ncclRemoteError;
    case ErrorCode::Timeout: return ncclTimeout;
    case ErrorCode::Aborted: return ncclRemoteError;  // poisoned by an earlier failure, here or on a peer
    case ErrorCode::Mismatch: return ncclInvalidUsage;
    case ErrorCode::Interrupted: return ncclSystemError;
    case ErrorCode::Internal: return ncclInternalError;
  }
  return ncclInternalError;
}

ncclResult_t resultOf(const std::exception& e) {
  if (auto* n = dynamic_cast<const NcclError*>(&e)) return n->result();
  if (auto* f = dynamic_cast<const Error*>(&e)) return resultOf(f->code());
  return ncclInternalError;
}

std::string notLive(const ncclComm* comm) {
  char address[32];
  std::snprintf(address, sizeof address, "%p", static_cast<const void*>(comm));
  return std::string("comm ") + address +
         " is not a communicator of this process: it was destroyed (ncclCommDestroy, ncclCommAbort) or never made";
}

ncclResult_t record(ncclComm_t comm, ncclResult_t result, const char* call, const std::string& message,
                    bool sticky) {
  const std::string text = std::string(call) + ": " + message;
  {
    std::lock_guard<std::mutex> lock(lastErrorMutex);
    lastError = text;
  }
  if (comm) comm->noteError(result, text, sticky);
  return result;
}

}  // namespace forestcc::nccl

using forestcc::nccl::lastError;
using forestcc::nccl::lastErrorMutex;

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (ncclGetLastError says which)";
    case ncclInternalError: return "internal error - please report this issue to the forestcc developers";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError says which)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError says what)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out";
    default: return "unknown result code";
  }
}

// The text stays valid until this thread asks again (NCCL's contract: a pointer into the library).
extern "C" const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  if (comm) {
    copy = comm->lastError();
    if (!copy.empty()) return copy.c_str();
  }
  std::lock_guard<std::mutex> lock(lastErrorMutex);
  copy = lastError;
  return copy.c_str();
}
