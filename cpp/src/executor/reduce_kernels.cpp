#include "executor/reduce_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/fp8.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {

// Tiles keep the partial result in L1 while the sources stream past it.
constexpr size_t kTile = 2048;

struct SumF { template <class T> T operator()(T a, T b) const { return a + b; } };
struct ProdF { template <class T> T operator()(T a, T b) const { return a * b; } };
struct MinF { template <class T> T operator()(T a, T b) const { return b < a ? b : a; } };
struct MaxF { template <class T> T operator()(T a, T b) const { return a < b ? b : a; } };

// Integer sums and products wrap (as numpy's do); done in the unsigned type to avoid UB.
template <class T> struct Wide { using type = T; };
template <> struct Wide<int8_t> { using type = uint8_t; };
template <> struct Wide<int32_t> { using type = uint32_t; };
template <> struct Wide<int64_t> { using type = uint64_t; };

// Sources are combined in the order given, (((s0 op s1) op s2) ...), so that ranks folding the
// same inputs in the same order get bitwise the same result. dst may alias any source: s0 and s1
// are read before the first write; a later one is kept aside tile by tile.
template <class T, class F>
void reduceNative(T* dst, const T* const* s, int n, size_t count, F f) {
  bool late = false;  // dst aliases a source at index >= 2
  for (int j = 2; j < n; ++j) late = late || s[j] == dst;
  if (late) {
    alignas(64) T kept[kTile];
    for (size_t b = 0; b < count; b += kTile) {
      const size_t e = std::min(count, b + kTile);
      std::memcpy(kept, dst + b, (e - b) * sizeof(T));
      for (size_t i = b; i < e; ++i) dst[i] = f(s[0][i], s[1][i]);
      for (int j = 2; j < n; ++j) {
        if (s[j] == dst) {
          for (size_t i = b; i < e; ++i) dst[i] = f(dst[i], kept[i - b]);
        } else {
          const T* x = s[j];
          for (size_t i = b; i < e; ++i) dst[i] = f(dst[i], x[i]);
        }
      }
    }
    return;
  }
  for (size_t b = 0; b < count; b += kTile) {
    const size_t e = std::min(count, b + kTile);
    const T* a = s[0];
    const T* c = s[1];
    for (size_t i = b; i < e; ++i) dst[i] = f(a[i], c[i]);
    for (int j = 2; j < n; ++j) {
      const T* x = s[j];
      for (size_t i = b; i < e; ++i) dst[i] = f(dst[i], x[i]);
    }
  }
}

template <class T, class F>
void reduceWrapping(T* dst, const T* const* s, int n, size_t count, F f) {
  using U = typename Wide<T>::type;
  reduceNative(reinterpret_cast<U*>(dst), reinterpret_cast<const U* const*>(s), n, count, f);
}

// ---- 16-bit floats: widen a tile to float32, reduce, narrow once ----

inline float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

struct Bf16Codec {
  static void widen(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(in[i]);
  }
  static void narrow(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = floatToBf16(in[i]);
  }
};

// float16 through _Float16 conversions; the F16C variant turns them into vcvtph2ps/vcvtps2ph.
struct F16Codec {
  static void widen(const uint16_t* in, float* out, size_t n) {
    const _Float16* h = reinterpret_cast<const _Float16*>(in);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(h[i]);
  }
  static void narrow(const float* in, uint16_t* out, size_t n) {
    _Float16* h = reinterpret_cast<_Float16*>(out);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<_Float16>(in[i]);
  }
};

__attribute__((target("avx2,f16c"))) void f16WidenF16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  F16Codec::widen(in + i, out + i, n - i);
}

__attribute__((target("avx2,f16c"))) void f16NarrowF16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  F16Codec::narrow(in + i, out + i, n - i);
}

const bool kHaveF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");

struct F16FastCodec {
  static void widen(const uint16_t* in, float* out, size_t n) {
    kHaveF16c ? f16WidenF16c(in, out, n) : F16Codec::widen(in, out, n);
  }
  static void narrow(const float* in, uint16_t* out, size_t n) {
    kHaveF16c ? f16NarrowF16c(in, out, n) : F16Codec::narrow(in, out, n);
  }
};

// 16- and 8-bit floats: Codec widens its storage type to float32 and narrows it back (once).
template <class Codec, class T, class F>
void reduceWidened(T* dst, const T* const* s, int n, size_t count, F f) {
  alignas(64) float acc[kTile];
  alignas(64) float tmp[kTile];
  for (size_t b = 0; b < count; b += kTile) {
    const size_t len = std::min(kTile, count - b);
    Codec::widen(s[0] + b, acc, len);
    for (int j = 1; j < n; ++j) {
      Codec::widen(s[j] + b, tmp, len);
      for (size_t i = 0; i < len; ++i) acc[i] = f(acc[i], tmp[i]);
    }
    Codec::narrow(acc, dst + b, len);
  }
}

template <class F>
void dispatchType(void* dst, const void* const* srcs, int n, size_t count, DataType type, F f) {
  switch (type) {
    case DataType::Int8: return reduceWrapping(static_cast<int8_t*>(dst), reinterpret_cast<const int8_t* const*>(srcs), n, count, f);
    case DataType::Uint8: return reduceNative(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
    case DataType::Int32: return reduceWrapping(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t* const*>(srcs), n, count, f);
    case DataType::Uint32: return reduceNative(static_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t* const*>(srcs), n, count, f);
    case DataType::Int64: return reduceWrapping(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t* const*>(srcs), n, count, f);
    case DataType::Uint64: return reduceNative(static_cast<uint64_t*>(dst), reinterpret_cast<const uint64_t* const*>(srcs), n, count, f);
    case DataType::Float16: return reduceWidened<F16FastCodec>(static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(srcs), n, count, f);
    case DataType::BFloat16: return reduceWidened<Bf16Codec>(static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(srcs), n, count, f);
    case DataType::Float8E4M3: return reduceWidened<Float8E4M3>(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
    case DataType::Float8E5M2: return reduceWidened<Float8E5M2>(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
    case DataType::Float32: return reduceNative(static_cast<float*>(dst), reinterpret_cast<const float* const*>(srcs), n, count, f);
    case DataType::Float64: return reduceNative(static_cast<double*>(dst), reinterpret_cast<const double* const*>(srcs), n, count, f);
  }
}

// Min and max of signed integers must compare as signed: keep them in their own type.
template <class F>
void dispatchOrdered(void* dst, const void* const* srcs, int n, size_t count, DataType type, F f) {
  switch (type) {
    case DataType::Int8: return reduceNative(static_cast<int8_t*>(dst), reinterpret_cast<const int8_t* const*>(srcs), n, count, f);
    case DataType::Int32: return reduceNative(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t* const*>(srcs), n, count, f);
    case DataType::Int64: return reduceNative(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t* const*>(srcs), n, count, f);
    default: return dispatchType(dst, srcs, n, count, type, f);
  }
}

template <class T>
void divideInts(T* p, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
}

template <class Codec, class T>
void divideWidened(T* p, size_t count, int divisor) {
  alignas(64) float tmp[kTile];
  const float d = static_cast<float>(divisor);
  for (size_t b = 0; b < count; b += kTile) {
    const size_t len = std::min(kTile, count - b);
    Codec::widen(p + b, tmp, len);
    for (size_t i = 0; i < len; ++i) tmp[i] /= d;
    Codec::narrow(tmp, p + b, len);
  }
}

}  // namespace

void reduceElements(void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op) {
  if (count == 0 || n <= 0) return;
  if (n == 1) {
    if (dst != srcs[0]) std::memcpy(dst, srcs[0], count * elementSize(type));
    return;
  }
  // In the order given (see reduceNative; reduceWidened widens every source before it writes).
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Avg: return dispatchType(dst, srcs, n, count, type, SumF{});
    case ReduceOp::Prod: return dispatchType(dst, srcs, n, count, type, ProdF{});
    case ReduceOp::Min: return dispatchOrdered(dst, srcs, n, count, type, MinF{});
    case ReduceOp::Max: return dispatchOrdered(dst, srcs, n, count, type, MaxF{});
  }
}

void divideElements(void* data, size_t count, DataType type, int divisor) {
  if (divisor == 1 || count == 0) return;
  switch (type) {
    case DataType::Int8: return divideInts(static_cast<int8_t*>(data), count, divisor);
    case DataType::Uint8: return divideInts(static_cast<uint8_t*>(data), count, divisor);
    case DataType::Int32: return divideInts(static_cast<int32_t*>(data), count, divisor);
    case DataType::Uint32: return divideInts(static_cast<uint32_t*>(data), count, divisor);
    case DataType::Int64: return divideInts(static_cast<int64_t*>(data), count, divisor);
    case DataType::Uint64: return divideInts(static_cast<uint64_t*>(data), count, divisor);
    case DataType::Float32: {
      float* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::Float64: {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::Float16: return divideWidened<F16FastCodec>(static_cast<uint16_t*>(data), count, divisor);
    case DataType::BFloat16: return divideWidened<Bf16Codec>(static_cast<uint16_t*>(data), count, divisor);
    case DataType::Float8E4M3: return divideWidened<Float8E4M3>(static_cast<uint8_t*>(data), count, divisor);
    case DataType::Float8E5M2: return divideWidened<Float8E5M2>(static_cast<uint8_t*>(data), count, divisor);
  }
}

}  // namespace forestcc::executor
