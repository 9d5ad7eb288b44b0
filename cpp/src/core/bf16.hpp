// bfloat16 <-> float32, as ml_dtypes converts them: widening is exact (bfloat16 is float32's top
// 16 bits); narrowing rounds to nearest even, and a NaN stays a quiet NaN with its sign.
// `static`: each translation unit keeps its own copy, so the one compiled for AVX-512
// (executor/reduce_kernels_body.hpp) can never be handed by the linker to code that must run on a
// CPU without it (core/fp8.hpp's Instance parameter does the same for the fp8 formats).
#pragma once

#include <cstdint>
#include <cstring>

namespace forestcc {

static inline float bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace forestcc
