// Entry points forestcc has no counterpart for call the fallback NCCL's function of the same name
// (forwarding.hpp) through these: with the communicator's real twin, or with no communicator.
// A failure of the fallback becomes the shim's, with its message, so ncclGetLastError tells it.
#pragma once

#include <string>

#include "nccl/comm.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

inline ncclResult_t fromFallback(ncclResult_t result) {
  if (result != ncclSuccess && result != ncclInProgress)
    throw NcclError(result, std::string("the fallback NCCL failed: ") + fallbackLastError());
  return result;
}

// Calls the fallback's `name` (of type `Fn`, whose first argument is the communicator) with the
// real communicator of `comm`; ncclInvalidUsage with the reason when `comm` has no twin.
template <class Fn, class... Args>
ncclResult_t forwardWithComm(const char* name, ncclComm_t comm, Args... args) {
  return guarded(comm, name, [&] {
    ncclComm::Use use(comm, name);
    ncclComm_t real = nullptr;
    auto* fn = reinterpret_cast<Fn*>(fallbackFunction(name, comm, &real));
    return fromFallback(fn(real, args...));
  });
}

// The same for calls that take no communicator (ncclInvalidUsage when no fallback is loaded).
template <class Fn, class... Args>
ncclResult_t forwardPlain(const char* name, Args... args) {
  return guarded(nullptr, name, [&] { return fromFallback(reinterpret_cast<Fn*>(fallbackFunction(name))(args...)); });
}

}  // namespace forestcc::nccl
