// GPU memory the shim lends a call on GPU memory where NCCL's arguments leave forestcc without a
// buffer: a Reduce's output away from the root (forestcc's reduce passes partial results through
// every rank's output), an in-place form's staged input or discarded output (execute.cpp, lent)
// and a PreMulSum's scaled input. Peers map it (cuMemAlloc memory, CUDA IPC).
//
// Reused from call to call without waiting: the calls of one communicator run in call order on the
// GPU, also across streams (docs/gpu.md), so a call's kernel never overlaps the previous one's.
// Growing allocates a larger buffer and keeps the old one until the communicator is destroyed (a
// kernel enqueued earlier may still use it, and peers keep it mapped).
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace forestcc::nccl {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` bytes on `device` (a communicator's calls are on one device).
  void* get(size_t bytes, int device);

 private:
  struct Block {
    void* data;
    size_t bytes;
    int device;
  };
  std::mutex mu_;
  std::vector<Block> blocks_;  // the last one is current
};

}  // namespace forestcc::nccl
