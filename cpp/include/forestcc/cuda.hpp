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
// Loads forestcc's GPU kernels into `device`'s primary context now. CUDA loads a kernel lazily at
// its first launch, and that load waits until all work already queued in the context has drained:
// a first collective made while the caller's stream is held (behind a flag, a peer's event, a
// long kernel) would block the host inside the launch, and, when what holds the stream is for
// this rank's host to release, never return. Called where a program says it uses a GPU (the NCCL
// shim's communicator init), before its streams hold anything. False: no CUDA, or a CUDA error.
bool cudaLoadKernels(int device);

}  // namespace forestcc
