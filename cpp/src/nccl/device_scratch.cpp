#include "nccl/device_scratch.hpp"

#include "nccl/cuda_driver.hpp"

namespace forestcc::nccl {

DeviceScratch::~DeviceScratch() {
  for (const Block& b : blocks_) {
    try {
      cuda::release(b.data, b.device);
    } catch (...) {
      // Teardown: a driver that refuses to free (the context is gone at exit) leaves nothing to do.
    }
  }
}

void* DeviceScratch::get(size_t bytes, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!blocks_.empty() && blocks_.back().bytes >= bytes && blocks_.back().device == device) return blocks_.back().data;
  // At least double the last size, so that a growing sequence of calls allocates O(log) times.
  size_t size = bytes < 256 ? 256 : bytes;
  if (!blocks_.empty() && blocks_.back().device == device && size < 2 * blocks_.back().bytes)
    size = 2 * blocks_.back().bytes;
  blocks_.push_back({cuda::allocate(size, device), size, device});
  return blocks_.back().data;
}

}  // namespace forestcc::nccl
