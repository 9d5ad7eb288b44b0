// CUDA side of the core, compiled whenever nvcc is found: device probes, device allocations for
// forestcc.cuda.empty, and a device semaphore round trip. The runner is device_runner.cu.
#include <cuda_runtime.h>

#include <string>

#include "cuda/device_launch.hpp"
#include "forestcc/cuda.hpp"
#include "forestcc/error.hpp"
#include "forestcc/semaphore_device.hpp"

namespace forestcc {

namespace {

__global__ void semaphoreRoundTrip(uint64_t* counters, int* ok) {
  // One semaphore looped back on itself: inbound and outbound are the same counter.
  SemaphoreDeviceHandle sem{counters, counters, 0};
  sem.signal();
  int spins = 0;
  while (!sem.tryWait() && ++spins < (1 << 20)) {
  }
  *ok = sem.expected == 1 ? 1 : 0;
}

}  // namespace

bool builtWithCuda() { return true; }

void* cudaAllocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorCode::System, std::string("cudaMalloc of ") + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  return p;
}

void cudaRelease(void* p) {
  if (p) cudaFree(p);
}

bool cudaLoadKernels(int device) {
  int previous = -1;
  if (device < 0 || cudaGetDevice(&previous) != cudaSuccess || (previous != device && cudaSetDevice(device) != cudaSuccess)) {
    cudaGetLastError();
    return false;
  }
  const bool ok = executor::loadKernels();
  if (previous != device) cudaSetDevice(previous);
  cudaGetLastError();
  return ok;
}

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool cudaSemaphoreSelfTest() {
  if (cudaDeviceCount() == 0) return false;
  uint64_t* counters = nullptr;
  int* ok = nullptr;
  if (cudaMalloc(&counters, sizeof(uint64_t)) != cudaSuccess) return false;
  cudaMalloc(&ok, sizeof(int));
  cudaMemset(counters, 0, sizeof(uint64_t));
  cudaMemset(ok, 0, sizeof(int));
  semaphoreRoundTrip<<<1, 1>>>(counters, ok);
  int host = 0;
  cudaMemcpy(&host, ok, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(counters);
  cudaFree(ok);
  return host == 1;
}

}  // namespace forestcc
