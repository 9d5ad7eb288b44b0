// GPU memory between processes of one node: a device buffer described by the CUDA IPC handle of
// the allocation it lies in (plus its offset there), and the opening of peers' handles, once per
// allocation and process (CUDA refuses a second open of the same allocation). Works for any
// cudaMalloc allocation, CuPy's and PyTorch's caching allocators included, and for several
// processes on one GPU. Memory made by the virtual memory API (cuMemCreate, PyTorch's
// expandable segments) has no IPC handle: exporting it is an error that says so.
#pragma once

#include <cstdint>
#include <string>

#include "forestcc/memory.hpp"

namespace forestcc::cuda_ipc {

// The CUDA device whose memory `p` points into; -1 for host memory (or a build without CUDA).
int deviceOf(const void* p);

// Fills the cuda fields of `h` (kind, device, IPC handle, offset, allocation id) for device
// memory [data, data + bytes), which must lie in one allocation. Throws InvalidUsage naming
// `what` when it cannot be shared.
void exportMemory(const void* data, uint64_t bytes, MemoryHandle& h, const char* what);

// The address in this process of the peer memory `h` describes. Each allocation is opened once
// per process, whatever the communicator (CUDA refuses a second open), and stays open while the
// process lives or until the peer's new allocation overlaps it (the peer freed it: a program that
// frees and allocates between calls, as perf/nccl's do between sizes, gets its new memory at the
// old addresses, and the stale import is closed so that the new one can be opened).
//
// Small cudaMalloc allocations share the driver's 2 MiB pages, and CUDA maps a page once per
// process: opening a second allocation of a page that is open already fails ("already mapped").
// The second one then lies at the same distance from the first in both processes (the whole page
// is mapped), which is where this finds it.
char* openPeerMemory(const MemoryHandle& h);

// How `h`'s allocation was opened here, for an error message (a copy from it that CUDA refused).
std::string describeImport(const MemoryHandle& h);

}  // namespace forestcc::cuda_ipc
