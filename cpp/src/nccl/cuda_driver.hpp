// The few CUDA driver calls the shim makes itself, through the driver the process has already
// loaded (dlopen with RTLD_NOLOAD): the shim must load, and run on host memory, in processes
// without CUDA, and a program with GPU buffers has loaded the driver. Collectives on GPU memory
// run in forestcc's CUDA runner (docs/gpu.md); these calls only serve what is NCCL-specific: where a
// pointer lives, a device scalar of a PreMulSum operator, the root's copy of an out-of-place
// broadcast, the GPU memory ncclMemAlloc returns and the shim lends calls. Failures throw NcclError(ncclUnhandledCudaError) naming the call.
#pragma once

#include <cstddef>

#include "nccl/include/nccl.h"

namespace forestcc::nccl::cuda {

// Looks for the driver again if it was not found before (called at each communicator's init: a
// program may load CUDA after its first calls; a dlopen per call would cost too much).
void lookForTheDriver();
// The CUDA device of GPU memory at `p`, or -1 for host memory (and for any pointer while the
// driver is not loaded).
int deviceOf(const void* p);
// The device of the calling thread's current context, -1 without CUDA or without a context.
int currentDevice();
// Whether the loaded libcuda.so.1 is a driver the CUDA runtime can start on (it has
// cuGetProcAddress), not a stand-in such as tests/nccl/host_libcuda.c.
bool runtimeCanStart();
// Copies `bytes` between any two pointers (host or GPU: unified addressing) once the work
// enqueued on `stream` so far has finished; returns when the copy is done. `device`: a device
// whose primary context is made current if the thread has none.
void copyAfterStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, int device);
// Makes `device`'s primary context the calling thread's current one while it lives (the thread's
// own is current again after), so that a call on GPU memory runs on its buffers' device whatever
// thread runs it: a kept call thread carries the device of its last job, and the caller's current
// device may be another, as NCCL allows. Nothing for device < 0 or while the driver is not loaded.
class OnDevice {
 public:
  explicit OnDevice(int device);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  bool pushed_ = false;
};

// Enqueues a copy of `bytes` between GPU buffers on `stream` and returns.
void copyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream, int device);

// GPU memory on `device` (cuMemAlloc: shareable through CUDA IPC, so peers map it), and its release.
void* allocate(size_t bytes, int device);
void release(void* p, int device);

}  // namespace forestcc::nccl::cuda
