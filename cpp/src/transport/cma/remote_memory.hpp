// A peer's registered host memory as seen from this process: a mapping of its shared segment
// (direct loads/stores) or, for memory outside forestcc segments, its pid and address for
// single-copy process_vm_readv/writev.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/shm_segment.hpp"

namespace forestcc {

struct RemoteMemory {
  char* mapped = nullptr;  // non-null: direct access
  int pid = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  int rank = -1;           // this rank, for errors
  int peer = -1;
  std::shared_ptr<ShmSegment> segment;  // keeps the mapping alive

  // Memory of process `pid` (rank `peer`) at `address`, reached with process_vm_readv/writev;
  // `rank` is this rank, for errors.
  static RemoteMemory inProcess(int pid, uint64_t address, uint64_t size, int rank, int peer) {
    RemoteMemory m;
    m.pid = pid, m.address = address, m.size = size, m.rank = rank, m.peer = peer;
    return m;
  }

  void write(uint64_t offset, const void* src, size_t bytes) const;
  void read(uint64_t offset, void* dst, size_t bytes) const;
};

}  // namespace forestcc
