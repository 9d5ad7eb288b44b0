// Host memory of another process on this node, reached with single-copy cross-process copies
// (process_vm_readv/writev): what the cma connection's write() and read() do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forestcc {

struct RemoteMemory {
  int pid = 0;
  uint64_t address = 0;  // in process `pid`
  uint64_t size = 0;
  int rank = -1;         // this rank, for errors
  int peer = -1;         // the rank of process `pid`, for errors

  // Memory of process `pid` (rank `peer`) at `address`; `rank` is this rank, for errors.
  static RemoteMemory inProcess(int pid, uint64_t address, uint64_t size, int rank, int peer) {
    RemoteMemory m;
    m.pid = pid, m.address = address, m.size = size, m.rank = rank, m.peer = peer;
    return m;
  }

  void write(uint64_t offset, const void* src, size_t bytes) const;
  void read(uint64_t offset, void* dst, size_t bytes) const;
};

}  // namespace forestcc
