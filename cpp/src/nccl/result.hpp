// How the shim reports failure: every entry point runs its body through `guarded`, which turns
// exceptions into an ncclResult_t and keeps the message for ncclGetLastError, so no error is ever
// lost between C++ and the C ABI.
#pragma once

#include <stdexcept>
#include <string>

#include "forestcc/error.hpp"
#include "nccl/comm.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

// An error the shim itself raises, with the NCCL code it returns (forestcc::Error maps to one).
class NcclError : public std::runtime_error {
 public:
  NcclError(ncclResult_t result, const std::string& message) : std::runtime_error(message), result_(result) {}
  ncclResult_t result() const { return result_; }

 private:
  ncclResult_t result_;
};

[[noreturn]] inline void refuse(const std::string& message) { throw NcclError(ncclInvalidUsage, message); }
// Why a call on a split's (shrink's, grow's) new communicator is refused before its agreement placed it.
constexpr const char* kStillBeingMade =
    "the communicator is still being made (its ncclCommSplit, Shrink or Grow has not placed it yet): poll "
    "ncclCommGetAsyncError until it says ncclSuccess";
[[noreturn]] inline void badArgument(const std::string& message) {
  throw NcclError(ncclInvalidArgument, message);
}

ncclResult_t resultOf(ErrorCode code);
// The NCCL code of whatever a call threw: an NcclError's own, a forestcc::Error's code, else internal.
ncclResult_t resultOf(const std::exception& e);

// Records `message` as the last error (of the process, and of `comm` when given) and returns
// `result`. Failures of communication (not argument checks) also become the comm's async error.
ncclResult_t record(ncclComm_t comm, ncclResult_t result, const char* call, const std::string& message,
                    bool sticky);

// The refusal of a handle that is not a live communicator (ncclComm::live).
std::string notLive(const ncclComm* comm);

template <class Body>
ncclResult_t guarded(ncclComm_t comm, const char* call, Body&& body) {
  if (comm && !ncclComm::live(comm)) return record(nullptr, ncclInvalidArgument, call, notLive(comm), false);
  // An ncclCommAbort from another thread frees `comm` only after the error is recorded in it.
  ncclComm::Hold hold(comm);
  // A C caller's signals are its own business (forestcc/error.hpp).
  InterruptChecksOff ownSignals;
  try {
    return body();
  } catch (const NcclError& e) {
    return record(comm, e.result(), call, e.what(), false);
  } catch (const Error& e) {
    const bool argument = e.code() == ErrorCode::InvalidUsage || e.code() == ErrorCode::InvalidType;
    return record(comm, resultOf(e.code()), call, e.what(), !argument);
  } catch (const std::bad_alloc&) {
    return record(comm, ncclSystemError, call, "out of host memory", false);
  } catch (const std::exception& e) {
    return record(comm, ncclInternalError, call, e.what(), true);
  }
}

}  // namespace forestcc::nccl
