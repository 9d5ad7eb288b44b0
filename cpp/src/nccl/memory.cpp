// ncclMemAlloc/Free and ncclCommRegister/Deregister. ncclMemAlloc returns host memory in a forestcc
// shared segment: same-node peers map it, so collectives on it copy straight between ranks (zero
// copy), which is what NCCL programs ask ncclMemAlloc for.
#include <map>
#include <mutex>
#include <string>

#include "forestcc/memory.hpp"
#include "nccl/comm.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

namespace {
std::mutex allocationsMutex;
std::map<void*, forestcc::SharedAllocation>& allocations() {
  static auto* all = new std::map<void*, forestcc::SharedAllocation>();  // outlives static destructors
  return *all;
}
}  // namespace

extern "C" ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, "ncclMemAlloc", [&] {
    if (!ptr) badArgument("ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return ncclSuccess;  // as NCCL: nothing allocated, NULL returned
    forestcc::SharedAllocation a(size);
    std::lock_guard<std::mutex> lock(allocationsMutex);
    *ptr = a.data();
    allocations().emplace(a.data(), std::move(a));
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclMemFree(void* ptr) {
  return guarded(nullptr, "ncclMemFree", [&] {
    if (!ptr) return ncclSuccess;
    std::lock_guard<std::mutex> lock(allocationsMutex);
    if (!allocations().erase(ptr))
      badArgument("ptr was not returned by ncclMemAlloc (or was freed already)");
    return ncclSuccess;
  });
}

// Registration is an NCCL optimisation hint; forestcc finds a buffer's segment at each call, so
// the handle only records the range (checked again at deregistration).
extern "C" ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded(comm, "ncclCommRegister", [&] {
    ncclComm::Use use(comm, "ncclCommRegister");
    if (!handle) badArgument("handle is NULL");
    if (!buff && size) badArgument("buff is NULL");
    std::lock_guard<std::mutex> lock(comm->registrationsMutex);
    // The handle is a fresh heap cell (so a stale or foreign handle is recognised as one).
    void* h = new char(0);
    comm->registrations[h] = size;
    *handle = h;
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded(comm, "ncclCommDeregister", [&] {
    ncclComm::Use use(comm, "ncclCommDeregister");
    std::lock_guard<std::mutex> lock(comm->registrationsMutex);
    auto it = comm->registrations.find(handle);
    if (it == comm->registrations.end())
      badArgument("handle was not returned by ncclCommRegister on this communicator (or was deregistered already)");
    delete static_cast<char*>(it->first);
    comm->registrations.erase(it);
    return ncclSuccess;
  });
}
