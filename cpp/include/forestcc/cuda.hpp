// What this build and machine offer for GPU memory. Always declared; without CUDA support in the
// build the answers are "no".
#pragma once

#include <cstddef>

namespace forestcc {

bool builtWithCuda();
// Number of visible CUDA devices (0 when the build has no CUDA, no driver or no GPU).
int cudaDeviceCount();
// Runs a device-side semaphore round trip on GPU 0 (signal then wait on counters in device
// memory); true on success. Exercises SemaphoreDeviceHandle in device code.
bool cudaSemaphoreSelfTest();
// Device memory on the current device (cudaMalloc: shareable through CUDA IPC), and its release.
// Throws forestcc::Error when the build has no CUDA or the allocation fails.
void* cudaAllocate(size_t bytes);
void cudaRelease(void* p);

}  // namespace forestcc
