#include "transport/cuda_ipc/ipc_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

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
  uint64_t known;         // bytes from exporterBase that handles named: the allocation has at least these
  char* base;             // the allocation's base in this process
  char* mapping;          // what cudaIpcOpenMemHandle returned for the page: closed with it
  bool ownsMapping;       // opened here (else found at its distance from an allocation opened before)
};
using Key = std::tuple<uint64_t, int, uint64_t>;  // (node, owner pid, allocation id)

// The opened allocations. Kept open while the process lives, unless a peer freed one (below).
std::mutex& openedMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<Key, Opened>& opened() {
  static auto* table = new std::map<Key, Opened>;
  return *table;
}

bool sameOwner(const Key& k, const MemoryHandle& h) { return std::get<0>(k) == h.nodeHash && std::get<1>(k) == h.ownerPid; }

// Whether [p, p + bytes) lies in memory this process has mapped (nullopt: the driver cannot say).
std::optional<bool> mappedHere(const char* p, uint64_t bytes) {
  static AddressRange range = driverFunction<AddressRange>("cuMemGetAddressRange");
  if (!range) return std::nullopt;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return false;
  return reinterpret_cast<uint64_t>(p) + bytes <= base + size;
}

}  // namespace

// A peer that frees an allocation and allocates again can get the same addresses, with a new
// allocation id (perf/nccl's programs do, between sizes). The old allocation's import is then
// stale: its memory is gone from the owner, yet the import still holds the addresses, so CUDA
// refuses to map the new allocation ("already mapped"), and an address found at a distance from
// the stale import is no memory of the owner's now ("invalid argument" on a copy from it). An
// allocation of the owner's that overlaps the new one cannot be alive (live allocations never
// overlap): it is forgotten, and its import closed unless an allocation still alive was found in
// it. An address found at a distance from a neighbour must be memory this process has mapped.
char* openPeerMemory(const MemoryHandle& h) {
  std::lock_guard<std::mutex> g(openedMutex());
  auto& table = opened();
  const uint64_t exporterBase = h.address - h.cudaOffset;
  const uint64_t known = h.cudaOffset + h.size;
  const auto key = std::make_tuple(h.nodeHash, h.ownerPid, h.cudaBufferId);
  auto found = table.find(key);
  if (found != table.end()) {
    found->second.known = std::max(found->second.known, known);
    return found->second.base + h.cudaOffset;
  }
  // Freed allocations of the owner's under the new one.
  std::vector<char*> staleMappings;
  for (auto it = table.begin(); it != table.end();) {
    const Opened& o = it->second;
    if (sameOwner(it->first, h) && o.exporterBase < exporterBase + known && exporterBase < o.exporterBase + o.known) {
      // Its import (its own, or the neighbour's it was found in): closed once nothing uses it.
      if (std::find(staleMappings.begin(), staleMappings.end(), o.mapping) == staleMappings.end())
        staleMappings.push_back(o.mapping);
      it = table.erase(it);
    } else {
      ++it;
    }
  }
  for (char* mapping : staleMappings) {
    const bool inUse = std::any_of(table.begin(), table.end(), [&](const auto& e) { return e.second.mapping == mapping; });
    if (inUse) continue;  // a live neighbour's memory: the owner's page is still there
    if (cudaIpcCloseMemHandle(mapping) != cudaSuccess) cudaGetLastError();
  }
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, h.cudaIpc, sizeof ipc);
  void* base = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (e == cudaSuccess) {
    table[key] = Opened{exporterBase, known, static_cast<char*>(base), static_cast<char*>(base), true};
    return static_cast<char*>(base) + h.cudaOffset;
  }
  cudaGetLastError();
  const std::string whose = "cannot open rank " + std::to_string(h.ownerRank) + "'s GPU memory (" +
                            std::to_string(h.size) + " bytes at offset " + std::to_string(h.cudaOffset) +
                            " of its allocation " + std::to_string(h.cudaBufferId) + ")";
  if (e != cudaErrorAlreadyMapped)
    throw Error(ErrorCode::System, whose + ": cudaIpcOpenMemHandle: " + cudaGetErrorString(e), -1, h.ownerRank);
  // A page this allocation shares with one opened before: the same distance from it here. A
  // neighbour from which the address is mapped memory here is preferred; the first one else.
  std::optional<Opened> chosen;
  for (const auto& [k, o] : table) {
    if (!sameOwner(k, h) || o.exporterBase / kDriverPage != exporterBase / kDriverPage) continue;
    char* here = o.base + (static_cast<int64_t>(exporterBase) - static_cast<int64_t>(o.exporterBase));
    const Opened candidate{exporterBase, known, here, o.mapping, false};
    if (mappedHere(here + h.cudaOffset, std::max<uint64_t>(h.size, 1)).value_or(true)) {
      chosen = candidate;
      break;
    }
    if (!chosen) chosen = candidate;
  }
  if (!chosen)
    throw Error(ErrorCode::System,
                whose + ": CUDA says its page is mapped here already (cudaIpcOpenMemHandle: already mapped), but "
                        "no allocation of that rank opened here lies on that page",
                -1, h.ownerRank);
  table[key] = *chosen;
  return chosen->base + h.cudaOffset;
}

std::string describeImport(const MemoryHandle& h) {
  std::lock_guard<std::mutex> g(openedMutex());
  auto& table = opened();
  auto found = table.find(std::make_tuple(h.nodeHash, h.ownerPid, h.cudaBufferId));
  if (found == table.end()) return "not opened here";
  const Opened& o = found->second;
  char* p = o.base + h.cudaOffset;
  std::string text = std::string(o.ownsMapping ? "opened here" : "found at its distance from another allocation opened here") +
                     ", at " + std::to_string(reinterpret_cast<uint64_t>(p)) + " here (owner's " +
                     std::to_string(h.address) + ")";
  const std::optional<bool> mapped = mappedHere(p, std::max<uint64_t>(h.size, 1));
  if (mapped) text += *mapped ? ", mapped here" : ", not an allocation CUDA knows here (cuMemGetAddressRange)";
  return text;
}

#else  // a build without CUDA: no pointer is device memory

int deviceOf(const void*) { return -1; }

void exportMemory(const void*, uint64_t, MemoryHandle&, const char* what) {
  throw Error(ErrorCode::InvalidUsage, std::string(what) + ": this forestcc was built without CUDA");
}

char* openPeerMemory(const MemoryHandle&) {
  throw Error(ErrorCode::InvalidUsage, "this forestcc was built without CUDA");
}

std::string describeImport(const MemoryHandle&) { return "not opened here (built without CUDA)"; }

#endif

}  // namespace forestcc::cuda_ipc
