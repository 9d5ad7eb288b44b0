#include "transport/cuda_ipc/ipc_memory.hpp"

#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "forestcc/error.hpp"

#ifdef FORESTCC_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace forestcc::cuda_ipc {

#ifdef FORESTCC_WITH_CUDA

namespace {

// Driver entry points through the runtime, so libforestcc needs no link to libcuda (and loads on
// machines without a driver).
using PointerAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

template <class F>
F driverFunction(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess || !fn) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

PointerAttribute pointerAttribute() {
  static PointerAttribute fn = driverFunction<PointerAttribute>("cuPointerGetAttribute");
  return fn;
}

[[noreturn]] void refuse(const char* what, const std::string& why) {
  throw Error(ErrorCode::InvalidUsage, std::string(what) + ": " + why);
}

}  // namespace

int deviceOf(const void* p) {
  if (!p) return -1;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // host memory of an old runtime, or no driver
    return -1;
  }
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

void exportMemory(const void* data, uint64_t bytes, MemoryHandle& h, const char* what) {
  static AddressRange range = driverFunction<AddressRange>("cuMemGetAddressRange");
  PointerAttribute attribute = pointerAttribute();
  if (!range || !attribute) refuse(what, "the CUDA driver does not offer cuMemGetAddressRange");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(data)) != CUDA_SUCCESS)
    refuse(what, "is not device memory of this process");
  const uint64_t offset = reinterpret_cast<uint64_t>(data) - base;
  if (offset + bytes > size)
    refuse(what, "spans more than one CUDA allocation (" + std::to_string(bytes) + " bytes at offset " +
                     std::to_string(offset) + " of an allocation of " + std::to_string(size) + ")");
  unsigned long long id = 0;
  if (attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, base) != CUDA_SUCCESS) refuse(what, "has no CUDA buffer id");
  int device = -1;
  attribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base);
  // One handle per allocation, asked once: the runtime call costs microseconds per collective,
  // and is not allowed while a CUDA graph is captured. The allocation id tells a new allocation
  // at an old address apart.
  static std::mutex* cacheMu = new std::mutex;
  static auto* cache = new std::map<uint64_t, std::pair<unsigned long long, cudaIpcMemHandle_t>>;
  cudaIpcMemHandle_t ipc;
  cudaError_t e = cudaSuccess;
  {
    std::lock_guard<std::mutex> g(*cacheMu);
    auto found = cache->find(base);
    if (found != cache->end() && found->second.first == id) {
      ipc = found->second.second;
    } else {
      e = cudaIpcGetMemHandle(&ipc, reinterpret_cast<void*>(base));
      if (e == cudaSuccess) (*cache)[base] = {id, ipc};
    }
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    refuse(what, std::string("CUDA cannot share this allocation with other processes (cudaIpcGetMemHandle: ") +
                     cudaGetErrorString(e) +
                     "); allocate it with cudaMalloc, CuPy, forestcc.cuda.empty, or PyTorch without "
                     "expandable_segments");
  }
  static_assert(sizeof ipc <= sizeof h.cudaIpc, "an IPC handle fits MemoryHandle::cudaIpc");
  h.kind = MemoryKind::Cuda;
  std::memcpy(h.cudaIpc, &ipc, sizeof ipc);
  h.cudaOffset = offset;
  h.cudaBufferId = id;
  h.cudaDevice = device;
  h.ownerPid = static_cast<int32_t>(getpid());
  h.size = bytes;
  h.address = reinterpret_cast<uint64_t>(data);
}

namespace {

constexpr uint64_t kDriverPage = 2ull << 20;  // cudaMalloc's page: what one IPC open maps

struct Opened {
  uint64_t exporterBase;  // the allocation's base in the owner's address space
  uint64_t size;
  char* base;             // and in this process
};

// (node, owner pid, allocation id) -> the opened allocation. Never destroyed: mappings live as
// long as the process.
std::mutex& openedMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<std::tuple<uint64_t, int, uint64_t>, Opened>& opened() {
  static auto* table = new std::map<std::tuple<uint64_t, int, uint64_t>, Opened>;
  return *table;
}

}  // namespace

char* openPeerMemory(const MemoryHandle& h) {
  std::lock_guard<std::mutex> g(openedMutex());
  auto& table = opened();
  const uint64_t exporterBase = h.address - h.cudaOffset;
  const auto key = std::make_tuple(h.nodeHash, h.ownerPid, h.cudaBufferId);
  auto found = table.find(key);
  if (found != table.end()) return found->second.base + h.cudaOffset;
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, h.cudaIpc, sizeof ipc);
  void* base = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (e == cudaErrorAlreadyMapped) {
    cudaGetLastError();
    // A page this allocation shares with one opened before: the same offset from it here.
    for (const auto& [k, o] : table)
      if (std::get<0>(k) == h.nodeHash && std::get<1>(k) == h.ownerPid &&
          o.exporterBase / kDriverPage == exporterBase / kDriverPage) {
        base = o.base + (static_cast<int64_t>(exporterBase) - static_cast<int64_t>(o.exporterBase));
        e = cudaSuccess;
        break;
      }
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorCode::System, "cannot open rank " + std::to_string(h.ownerRank) +
                                       "'s GPU memory (cudaIpcOpenMemHandle: " + cudaGetErrorString(e) + ")",
                -1, h.ownerRank);
  }
  table[key] = Opened{exporterBase, h.size + h.cudaOffset, static_cast<char*>(base)};
  return static_cast<char*>(base) + h.cudaOffset;
}

#else  // a build without CUDA: no pointer is device memory

int deviceOf(const void*) { return -1; }

void exportMemory(const void*, uint64_t, MemoryHandle&, const char* what) {
  throw Error(ErrorCode::InvalidUsage, std::string(what) + ": this forestcc was built without CUDA");
}

char* openPeerMemory(const MemoryHandle&) {
  throw Error(ErrorCode::InvalidUsage, "this forestcc was built without CUDA");
}

#endif

}  // namespace forestcc::cuda_ipc
