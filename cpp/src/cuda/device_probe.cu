// CUDA side of the core, compiled whenever nvcc is found. Today it probes devices and runs the
// device semaphore; the CUDA IPC transport and the GPU executor drop in beside it.
#include <cuda_runtime.h>

#include "forestcc/cuda.hpp"
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
