// Is a pointer GPU memory? Asked of the CUDA driver only when the process has already loaded it
// (a program with GPU buffers has); otherwise every pointer is host memory. Until forestcc's CUDA
// path runs collectives, an operation on GPU memory goes to the fallback NCCL, or is refused with
// ncclInvalidUsage and a message when there is none (forwarding.cpp).
#pragma once

namespace forestcc::nccl {

bool isDevicePointer(const void* p);

}  // namespace forestcc::nccl

namespace forestcc::nccl {
// The CUDA device of the calling thread when the process has loaded CUDA, else -1 (a host-memory
// communicator has no device).
int currentDevice();
}  // namespace forestcc::nccl
