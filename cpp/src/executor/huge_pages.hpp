// Large private buffers that calls keep reusing (DDP's gradient buckets, a training loop's
// tensors) are moved onto 2 MiB pages. Peers reach private memory with cross-process copies
// (process_vm_readv/writev), which pin every page they touch: on 4 KiB pages that was a third of a
// 25 MiB all_reduce's time on torch tensors (numpy already asks for huge pages for its large
// arrays, torch does not). A buffer is moved the second time a call uses it, so a buffer used once
// never pays for the move (a copy of the buffer, once). FORESTCC_HUGE_PAGE_BYTES: the smallest
// buffer considered; 0: never.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace forestcc::executor {

class HugePageAdvisor {
 public:
  explicit HugePageAdvisor(uint64_t minBytes) : minBytes_(minBytes) {}

  // A call uses [data, data + bytes) of this process's own (not shared) host memory.
  void used(const void* data, uint64_t bytes);

 private:
  struct Seen {
    uint64_t address, bytes;
    bool moved;
  };
  static constexpr std::size_t kRemembered = 64;  // buffers remembered, the least recently used dropped
  uint64_t minBytes_;
  std::vector<Seen> seen_;
};

}  // namespace forestcc::executor
