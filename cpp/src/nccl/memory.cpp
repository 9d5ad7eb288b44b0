// ncclMemAlloc/Free and ncclCommRegister/Deregister. ncclMemAlloc returns what NCCL programs ask it
// for, memory peers map (zero copy): GPU memory on the current device when the process uses CUDA
// (cuMemAlloc, shareable through CUDA IPC, as NCCL's is; programs copy into it with cudaMemcpy), else
// host memory in a forestcc shared segment, which same-node peers map.
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "forestcc/memory.hpp"
#include "nccl/comm.hpp"
#include "nccl/cuda_driver.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

namespace {
// One ncclMemAlloc: a shared segment, or GPU memory on `device`.
struct Allocation {
  std::unique_ptr<forestcc::SharedAllocation> host;
  int device = -1;
};
std::mutex allocationsMutex;
std::map<void*, Allocation>& allocations() {
  static auto* all = new std::map<void*, Allocation>();  // outlives static destructors
  return *all;
}
}  // namespace

extern "C" ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, "ncclMemAlloc", [&] {
    if (!ptr) badArgument("ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return ncclSuccess;  // as NCCL: nothing allocated, NULL returned
    Allocation a;
    const int device = forestcc::nccl::cuda::currentDevice();
    if (device >= 0) {
      a.device = device;
      *ptr = forestcc::nccl::cuda::allocate(size, device);
    } else {
      a.host = std::make_unique<forestcc::SharedAllocation>(size);
      *ptr = a.host->data();
    }
    std::lock_guard<std::mutex> lock(allocationsMutex);
    allocations().emplace(*ptr, std::move(a));
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclMemFree(void* ptr) {
  return guarded(nullptr, "ncclMemFree", [&] {
    if (!ptr) return ncclSuccess;
    Allocation a;
    {
      std::lock_guard<std::mutex> lock(allocationsMutex);
      auto it = allocations().find(ptr);
      if (it == allocations().end()) badArgument("ptr was not returned by ncclMemAlloc (or was freed already)");
      a = std::move(it->second);
      allocations().erase(it);
    }
    if (a.device >= 0) forestcc::nccl::cuda::release(ptr, a.device);
    return ncclSuccess;
  });
}

// Registration is an NCCL optimisation hint; forestcc finds a buffer's segment (host) or exports its
// allocation through CUDA IPC, cached per allocation (GPU), at each call, so the handle only records
// the range (checked again at deregistration), for host and GPU memory alike.
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
