// The two 8-bit float formats, exactly as ml_dtypes converts them (host only):
//   float8_e4m3fn  1.4.3, bias 7: no infinities, S.1111.111 is NaN, largest finite 448;
//   float8_e5m2    1.5.2, bias 15: IEEE-like, S.11111.00 is infinity, S.11111.xx NaN.
// float32 -> fp8 rounds to nearest even, and a value that rounds past the largest finite one
// becomes NaN (e4m3fn) or infinity (e5m2); NaN keeps its sign. (torch.Tensor.to saturates e4m3fn to
// +-448 instead; NCCL's and ml_dtypes' conversions do not.) One rounding per conversion: the
// reductions widen to float32, combine there and narrow once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace forestcc {

// Instance: a type from an anonymous namespace gives the instantiation internal linkage, so a
// translation unit compiled for AVX-512 (executor/reduce_kernels_body.hpp) keeps its own copies
// and the linker can never hand them to code that must run on a CPU without AVX-512.
template <int ExpBits, int ManBits, bool IeeeSpecials, class Instance = void>
struct Fp8Format {
  static constexpr int kExpBits = ExpBits;
  static constexpr int kManBits = ManBits;
  static constexpr bool kIeeeSpecials = IeeeSpecials;
  static constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  static constexpr uint8_t kInfinity = IeeeSpecials ? uint8_t(((1 << ExpBits) - 1) << ManBits) : 0;
  static constexpr uint8_t kNan = IeeeSpecials ? uint8_t(kInfinity | (1 << (ManBits - 1))) : 0x7f;
  static constexpr uint8_t kMaxFinite = IeeeSpecials ? uint8_t(kInfinity - 1) : 0x7e;
  static constexpr uint8_t kOverflow = IeeeSpecials ? kInfinity : kNan;

  static float toFloat(uint8_t v) {
    const uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
    const uint32_t mag = v & 0x7f;
    uint32_t bits;
    if (IeeeSpecials ? mag >= kInfinity : mag == kNan) {
      bits = mag == kInfinity ? 0x7f800000u : 0x7fc00000u;
    } else if (mag >> ManBits == 0) {  // zero or subnormal: man * 2^(1 - bias - ManBits), exact in float32
      float f = static_cast<float>(mag);
      for (int i = 0; i < kBias - 1 + ManBits; ++i) f *= 0.5f;
      std::memcpy(&bits, &f, 4);
    } else {  // normal: rebias the exponent, widen the mantissa
      bits = (mag + static_cast<uint32_t>((127 - kBias) << ManBits)) << (23 - ManBits);
    }
    bits |= sign;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  static uint8_t fromFloat(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | kNan;
    constexpr int kDrop = 23 - ManBits;  // float32 mantissa bits that do not fit
    constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;  // 2^(1 - bias)
    uint32_t code;
    if (u >= kMinNormal) {
      // Round the float32 bits to nearest even at the fp8 mantissa's last place; a carry moves
      // into the exponent, as it should. Then rebias.
      const uint32_t r = u + ((1u << (kDrop - 1)) - 1) + ((u >> kDrop) & 1);
      code = (r >> kDrop) - (static_cast<uint32_t>(127 - kBias) << ManBits);
      if (code > kMaxFinite) return sign | kOverflow;
    } else {
      // Below the smallest normal: count quanta of 2^(1 - bias - ManBits), rounding to nearest
      // even; rounding up to 2^ManBits quanta gives the smallest normal's code, as it should.
      const int exp = static_cast<int>(u >> 23);  // float32 subnormals (exp 0) are far below
      if (exp == 0) return sign;
      const uint32_t sig = (u & 0x7fffffu) | 0x800000u;
      const int shift = (127 - kBias + 1) - exp + kDrop;  // > kDrop
      if (shift > 25) return sign;  // under half the smallest subnormal
      const uint32_t half = 1u << (shift - 1);
      const uint32_t rest = sig & ((half << 1) - 1);
      code = sig >> shift;
      if (rest > half || (rest == half && (code & 1))) ++code;
    }
    return sign | static_cast<uint8_t>(code);
  }

  static void widen(const uint8_t* in, float* out, size_t n) {
    static const struct Table {
      float value[256];
      Table() {
        for (int v = 0; v < 256; ++v) value[v] = toFloat(static_cast<uint8_t>(v));
      }
    } table;
    for (size_t i = 0; i < n; ++i) out[i] = table.value[in[i]];
  }
  static void narrow(const float* in, uint8_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = fromFloat(in[i]);
  }
};

using Float8E4M3 = Fp8Format<4, 3, false>;
using Float8E5M2 = Fp8Format<5, 2, true>;

}  // namespace forestcc
