#include "executor/huge_pages.hpp"

#include <sys/mman.h>

#include <algorithm>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1: collapse these pages into huge pages now
#endif

namespace forestcc::executor {

namespace {

constexpr uint64_t kHugePage = 2u << 20;

// The whole 2 MiB pages inside the range onto huge pages. Best effort: an older kernel (EINVAL),
// no free huge page (EAGAIN, ENOMEM) or memory that cannot be moved leaves the pages as they are,
// which only costs what it did before.
void moveToHugePages(uint64_t address, uint64_t bytes) {
  const uint64_t lo = (address + kHugePage - 1) / kHugePage * kHugePage;
  const uint64_t hi = (address + bytes) / kHugePage * kHugePage;
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_COLLAPSE);
}

}  // namespace

void HugePageAdvisor::used(const void* data, uint64_t bytes) {
  if (minBytes_ == 0 || bytes < minBytes_) return;
  const uint64_t address = reinterpret_cast<uint64_t>(data);
  auto it = std::find_if(seen_.begin(), seen_.end(),
                         [&](const Seen& s) { return s.address == address && s.bytes == bytes; });
  Seen entry{address, bytes, false};
  if (it != seen_.end()) {
    entry = *it;
    seen_.erase(it);
    if (!entry.moved) {
      moveToHugePages(address, bytes);
      entry.moved = true;
    }
  } else if (seen_.size() == kRemembered) {
    seen_.erase(seen_.begin());
  }
  seen_.push_back(entry);
}

}  // namespace forestcc::executor
