#include "nccl/cuda_driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "nccl/result.hpp"

namespace forestcc::nccl::cuda {

namespace {

// Values of cuda.h used here.
constexpr int kAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2;   // CU_MEMORYTYPE_DEVICE
using Context = void*;                      // CUcontext

struct Driver {
  int (*pointerGetAttribute)(void* data, int attribute, unsigned long long pointer) = nullptr;
  int (*primaryCtxRetain)(Context* ctx, int device) = nullptr;
  int (*ctxPush)(Context ctx) = nullptr;
  int (*ctxPop)(Context* ctx) = nullptr;
  int (*memAlloc)(unsigned long long* p, size_t bytes) = nullptr;
  int (*memFree)(unsigned long long p) = nullptr;
  int (*streamSynchronize)(void* stream) = nullptr;
  int (*memcpy)(unsigned long long dst, unsigned long long src, size_t bytes) = nullptr;
  int (*memcpyAsync)(unsigned long long dst, unsigned long long src, size_t bytes, void* stream) = nullptr;
  int (*getErrorString)(int error, const char** text) = nullptr;
  bool complete = false;  // every function above was found
  int (*ctxGetDevice)(int* device) = nullptr;  // optional: without it, no current device
  void* getProcAddress = nullptr;               // optional: what the CUDA runtime starts from
};

template <class F>
void find(void* lib, const char* name, F* out, bool* complete) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *complete = false;
}

Driver load() {
  Driver d;
  // RTLD_NOLOAD: never load CUDA into a process that did not (no GPU pointers can exist there).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (!lib) return d;
  d.complete = true;
  find(lib, "cuPointerGetAttribute", &d.pointerGetAttribute, &d.complete);
  find(lib, "cuDevicePrimaryCtxRetain", &d.primaryCtxRetain, &d.complete);
  // The _v2 entry points are the ones cuda.h maps these names to.
  find(lib, "cuCtxPushCurrent_v2", &d.ctxPush, &d.complete);
  find(lib, "cuCtxPopCurrent_v2", &d.ctxPop, &d.complete);
  find(lib, "cuMemAlloc_v2", &d.memAlloc, &d.complete);
  find(lib, "cuMemFree_v2", &d.memFree, &d.complete);
  find(lib, "cuStreamSynchronize", &d.streamSynchronize, &d.complete);
  find(lib, "cuMemcpy", &d.memcpy, &d.complete);
  find(lib, "cuMemcpyAsync", &d.memcpyAsync, &d.complete);
  find(lib, "cuGetErrorString", &d.getErrorString, &d.complete);
  d.ctxGetDevice = reinterpret_cast<decltype(d.ctxGetDevice)>(dlsym(lib, "cuCtxGetDevice"));
  d.getProcAddress = dlsym(lib, "cuGetProcAddress_v2");
  return d;
}

// Looked up at the first call that needs it and again at each communicator's init
// (lookForTheDriver) while it was not found: a program that uses GPUs loads CUDA before it makes the
// communicators its GPU calls go to, and a dlopen per call would cost more than a small collective.
// Without the driver, every pointer is host memory. A found driver stays (it is never unloaded).
std::mutex loadMutex;
std::atomic<const Driver*> found{nullptr};

void loadIfPresent() {
  std::lock_guard<std::mutex> lock(loadMutex);
  if (found.load(std::memory_order_acquire)) return;
  Driver d = load();
  if (d.pointerGetAttribute) found.store(new Driver(d), std::memory_order_release);
}

const Driver& driver() {
  static const Driver none;
  static std::once_flag first;
  if (const Driver* d = found.load(std::memory_order_acquire)) return *d;
  std::call_once(first, loadIfPresent);
  const Driver* d = found.load(std::memory_order_acquire);
  return d ? *d : none;
}

[[noreturn]] void fail(const Driver& d, const char* call, int error) {
  const char* text = nullptr;
  if (d.getErrorString) d.getErrorString(error, &text);
  throw NcclError(ncclUnhandledCudaError,
                  std::string(call) + " failed: CUDA error " + std::to_string(error) + " (" + (text ? text : "?") + ")");
}

const Driver& usable(const char* call) {
  const Driver& d = driver();
  if (!d.complete)
    throw NcclError(ncclUnhandledCudaError, std::string(call) + ": the CUDA driver (libcuda.so.1) is not loaded "
                                                                "in this process, or lacks a function the shim needs");
  return d;
}

// The driver calls run in `device`'s primary context (the one the CUDA runtime, and so PyTorch
// and forestcc's runner, use), made current for the call and popped after: a thread that never
// used CUDA (a non-blocking communicator's call thread) has no context, and the caller's own
// current context must be left as it was.
constexpr int kMaxDevices = 64;

// `device`'s primary context, retained once and kept: the program's own use of the device keeps
// it alive anyway.
Context primary(const Driver& d, int device) {
  if (device < 0 || device >= kMaxDevices)
    throw NcclError(ncclInvalidArgument, "CUDA device " + std::to_string(device) + " is out of range");
  static std::mutex mu;
  static Context contexts[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!contexts[device])
    if (int e = d.primaryCtxRetain(&contexts[device], device)) fail(d, "cuDevicePrimaryCtxRetain", e);
  return contexts[device];
}

class InDevice {
 public:
  InDevice(const Driver& d, int device) : d_(d) {
    if (int e = d.ctxPush(primary(d, device))) fail(d, "cuCtxPushCurrent", e);
  }
  ~InDevice() {
    Context popped = nullptr;
    d_.ctxPop(&popped);  // cannot fail after a successful push, and a destructor must not throw
  }

 private:
  const Driver& d_;
};

unsigned long long address(const void* p) { return reinterpret_cast<unsigned long long>(p); }

}  // namespace

void lookForTheDriver() { loadIfPresent(); }

OnDevice::OnDevice(int device) {
  if (device < 0) return;
  const Driver& d = driver();
  if (!d.complete) return;
  if (int e = d.ctxPush(primary(d, device))) fail(d, "cuCtxPushCurrent", e);
  pushed_ = true;
}

OnDevice::~OnDevice() {
  if (!pushed_) return;
  Context popped = nullptr;
  driver().ctxPop(&popped);
}

int deviceOf(const void* p) {
  if (!p) return -1;
  const Driver& d = driver();
  if (!d.pointerGetAttribute) return -1;
  unsigned type = 0;
  if (d.pointerGetAttribute(&type, kAttributeMemoryType, address(p)) != 0 || type != kMemoryTypeDevice) return -1;
  int device = -1;
  if (d.pointerGetAttribute(&device, kAttributeDeviceOrdinal, address(p)) != 0) return -1;
  return device;
}

int currentDevice() {
  // Not a hot path (communicator init, ncclMemAlloc): looks for a driver loaded since the last look.
  if (!found.load(std::memory_order_acquire)) loadIfPresent();
  const Driver& d = driver();
  int device = -1;
  if (!d.ctxGetDevice || d.ctxGetDevice(&device) != 0) return -1;
  return device;
}

bool runtimeCanStart() { return driver().getProcAddress != nullptr; }

void copyAfterStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, int device) {
  const Driver& d = usable("copying to or from GPU memory");
  InDevice in(d, device);
  if (int e = d.streamSynchronize(stream)) fail(d, "cuStreamSynchronize", e);
  if (bytes == 0) return;
  if (int e = d.memcpy(address(dst), address(src), bytes)) fail(d, "cuMemcpy", e);
}

void copyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, int device) {
  if (bytes == 0) return;
  const Driver& d = usable("copying GPU memory");
  InDevice in(d, device);
  if (int e = d.memcpyAsync(address(dst), address(src), bytes, stream)) fail(d, "cuMemcpyAsync", e);
}

void* allocate(size_t bytes, int device) {
  const Driver& d = usable("allocating GPU memory");
  InDevice in(d, device);
  unsigned long long p = 0;
  if (int e = d.memAlloc(&p, bytes)) fail(d, ("cuMemAlloc of " + std::to_string(bytes) + " bytes").c_str(), e);
  return reinterpret_cast<void*>(p);
}

void release(void* p, int device) {
  if (!p) return;
  const Driver& d = usable("freeing GPU memory");
  InDevice in(d, device);
  if (int e = d.memFree(address(p))) fail(d, "cuMemFree", e);
}

}  // namespace forestcc::nccl::cuda
