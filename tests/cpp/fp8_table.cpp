// Prints forestcc's fp8 conversions for tests/test_fp8.py to compare with ml_dtypes: the float32 value
// of each of the 256 codes of both formats (as float32 bits), then the code of each float32 read
// (as bits, one per line) from stdin. Built by the test from cpp/src/core/fp8.hpp alone.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/fp8.hpp"

namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

int main() {
  for (int v = 0; v < 256; ++v)
    std::printf("%08x %08x\n", bitsOf(forestcc::Float8E4M3::toFloat(static_cast<uint8_t>(v))),
                bitsOf(forestcc::Float8E5M2::toFloat(static_cast<uint8_t>(v))));
  unsigned bits;
  while (std::scanf("%x", &bits) == 1) {
    float f;
    std::memcpy(&f, &bits, 4);
    std::printf("%02x %02x\n", forestcc::Float8E4M3::fromFloat(f), forestcc::Float8E5M2::fromFloat(f));
  }
  return 0;
}
