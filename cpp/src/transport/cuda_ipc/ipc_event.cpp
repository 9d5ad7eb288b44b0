#include "transport/cuda_ipc/ipc_event.hpp"

#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "forestcc/error.hpp"

#ifdef FORESTCC_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace forestcc::cuda_ipc {

#ifdef FORESTCC_WITH_CUDA

namespace {

void check(cudaError_t e, const std::string& what, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // not sticky: the next call must not see it
  throw Error(ErrorCode::System, what + ": " + call + ": " + cudaGetErrorString(e));
}

struct PooledEvent {
  cudaEvent_t event;
  cudaIpcEventHandle_t handle;
};

// Free events by device; never destroyed (module comment). Leaked on purpose: static
// destructors run after the CUDA runtime may be gone.
std::mutex& poolMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<int, std::vector<PooledEvent>>& pool() {
  static auto* free = new std::map<int, std::vector<PooledEvent>>;
  return *free;
}

// Peers' events opened here, by (owner pid, handle bytes).
std::mutex& openedMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<std::pair<int32_t, std::string>, cudaEvent_t>& opened() {
  static auto* table = new std::map<std::pair<int32_t, std::string>, cudaEvent_t>;
  return *table;
}

}  // namespace

bool available() { return true; }

CurrentDevice::CurrentDevice(int device, const std::string& what) {
  check(cudaGetDevice(&previous_), what, "cudaGetDevice");
  if (previous_ == device) return;
  check(cudaSetDevice(device), what, "cudaSetDevice");
}

CurrentDevice::~CurrentDevice() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0) cudaSetDevice(previous_);
  cudaGetLastError();
}

SharedEvent::SharedEvent(int device, const std::string& what) : device_(device) {
  cudaIpcEventHandle_t handle{};
  {
    std::lock_guard<std::mutex> g(poolMutex());
    std::vector<PooledEvent>& free = pool()[device];
    if (!free.empty()) {
      event_ = free.back().event;
      handle = free.back().handle;
      free.pop_back();
    }
  }
  if (!event_) {
    CurrentDevice current(device, what);
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming), what,
          "cudaEventCreateWithFlags(interprocess)");
    const cudaError_t e = cudaIpcGetEventHandle(&handle, event);
    if (e != cudaSuccess) cudaEventDestroy(event);  // no peer knows it yet
    check(e, what, "cudaIpcGetEventHandle");
    event_ = event;
  }
  static_assert(sizeof handle <= sizeof handle_.ipc, "an IPC event handle fits EventHandle::ipc");
  std::memcpy(handle_.ipc, &handle, sizeof handle);
  handle_.ownerPid = static_cast<int32_t>(getpid());
  handle_.device = device;
}

SharedEvent::~SharedEvent() {
  std::lock_guard<std::mutex> g(poolMutex());
  cudaIpcEventHandle_t handle;
  std::memcpy(&handle, handle_.ipc, sizeof handle);
  pool()[device_].push_back(PooledEvent{static_cast<cudaEvent_t>(event_), handle});
}

EventHandle SharedEvent::record(void* stream, const std::string& what) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)), what, "cudaEventRecord");
  return handle_;
}

void* sideStream(int device, const std::string& what) {
  static std::mutex mu;
  static std::map<int, cudaStream_t> streams;  // never destroyed: work may still run on them at exit
  std::lock_guard<std::mutex> g(mu);
  cudaStream_t& s = streams[device];
  if (!s) {
    CurrentDevice current(device, what);
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), what, "cudaStreamCreateWithFlags");
  }
  return s;
}

void SharedEvent::awaitOn(void* stream, const std::string& what) const {
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0), what,
        "cudaStreamWaitEvent");
}

bool SharedEvent::reached(const std::string& what) const {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (e == cudaErrorNotReady) return false;
  check(e, what, "cudaEventQuery");
  return true;
}

bool capturing(void* stream, const std::string& what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status), what, "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

void waitForPeerEvent(const EventHandle& h, void* stream, const std::string& what) {
  if (!h.ownerPid) throw Error(ErrorCode::Internal, what + ": the peer sent no CUDA event");
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> g(openedMutex());
    auto key = std::make_pair(h.ownerPid, std::string(reinterpret_cast<const char*>(h.ipc), sizeof h.ipc));
    auto found = opened().find(key);
    if (found != opened().end()) {
      event = found->second;
    } else {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, h.ipc, sizeof handle);
      check(cudaIpcOpenEventHandle(&event, handle), what, "cudaIpcOpenEventHandle");
      opened()[key] = event;
    }
  }
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), event, 0), what, "cudaStreamWaitEvent");
}

void copyOnStream(void* dst, const void* src, uint64_t bytes, void* stream, const std::string& what) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)), what,
        "cudaMemcpyAsync");
}

#else  // a build without CUDA

namespace {
[[noreturn]] void noCuda(const std::string& what) {
  throw Error(ErrorCode::InvalidUsage, what + ": this forestcc was built without CUDA (no nvcc when it was built): "
                                              "it cannot send or receive GPU memory");
}
}  // namespace

bool available() { return false; }
CurrentDevice::CurrentDevice(int, const std::string& what) { noCuda(what); }
CurrentDevice::~CurrentDevice() = default;
SharedEvent::SharedEvent(int device, const std::string& what) : device_(device) { noCuda(what); }
SharedEvent::~SharedEvent() = default;
EventHandle SharedEvent::record(void*, const std::string& what) { noCuda(what); }
void* sideStream(int, const std::string& what) { noCuda(what); }
void SharedEvent::awaitOn(void*, const std::string& what) const { noCuda(what); }
bool SharedEvent::reached(const std::string& what) const { noCuda(what); }
bool capturing(void*, const std::string& what) { noCuda(what); }
void waitForPeerEvent(const EventHandle&, void*, const std::string& what) { noCuda(what); }
void copyOnStream(void*, const void*, uint64_t, void*, const std::string& what) { noCuda(what); }

#endif

}  // namespace forestcc::cuda_ipc
