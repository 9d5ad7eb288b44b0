// Is a pointer GPU memory? Asked of the CUDA driver only when the process has already loaded it
// (a program with GPU buffers has); otherwise every pointer is host memory. Until forestcc's CUDA
// path runs collectives, a GPU pointer is refused with ncclInvalidUsage and a message.
#pragma once

namespace forestcc::nccl {

bool isDevicePointer(const void* p);
// Throws InvalidUsage naming `what` when `p` is GPU memory.
void requireHostPointer(const void* p, const char* what);

}  // namespace forestcc::nccl

namespace forestcc::nccl {
// The CUDA device of the calling thread when the process has loaded CUDA, else -1 (a host-memory
// communicator has no device).
int currentDevice();
}  // namespace forestcc::nccl
