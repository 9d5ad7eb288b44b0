// What the C++ benchmarks in perf/ share: the size argument ("64K", "1M", "2G") and ordinary
// process memory as numpy gives it to large arrays (page-aligned, transparent huge pages asked for).
#pragma once

#include <sys/mman.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace forestcc::bench {

inline size_t parseSize(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string suffix(end);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g") mult = 1ull << 30;
  else if (!suffix.empty()) throw std::invalid_argument("bad size '" + s + "' (use a number with K, M or G)");
  return static_cast<size_t>(v * mult);
}

// Page-aligned memory on transparent huge pages (numpy madvises them for large arrays), so copies
// and reductions from it run at their best. Not touched here: the caller fills it before timing.
class PlainMemory {
 public:
  explicit PlainMemory(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of " + std::to_string(bytes) + " bytes failed");
    madvise(p, bytes, MADV_HUGEPAGE);
    data_ = static_cast<char*>(p);
  }
  ~PlainMemory() { munmap(data_, bytes_); }
  PlainMemory(const PlainMemory&) = delete;
  PlainMemory& operator=(const PlainMemory&) = delete;
  char* data() const { return data_; }

 private:
  char* data_;
  size_t bytes_;
};

}  // namespace forestcc::bench
