// The CPU reductions' code, compiled once per instruction-set level: reduce_kernels_<level>.cpp
// defines FORESTCC_REDUCE_ISA (the namespace of its entry points) and includes this file, and
// CMakeLists.txt gives each of those files its own -m flags. Native types: the same loops at
// every level, vectorized by the compiler at the level's width. 16- and 8-bit floats: at
// x86-64-v2 tiles are widened to float32 arrays with the scalar conversions, reduced, narrowed;
// at AVX2 and AVX-512 (under __AVX2__) hand-written vector conversions, which give the scalar
// ones' bits exactly, let each vector be reduced in registers. Element-wise a op b has no order
// across elements, so vector width never changes a result.
//
// Everything here has internal linkage (an anonymous namespace; Fp8Format gets a local Instance
// type): a template or inline function with external linkage would be instantiated in each of
// these translation units with different instructions, and the linker would keep one copy for
// all of them, perhaps an AVX-512 one for code that runs on a CPU without it.
#ifndef FORESTCC_REDUCE_ISA
#error "define FORESTCC_REDUCE_ISA (the level's namespace) before including reduce_kernels_body.hpp"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bf16.hpp"
#include "core/fp8.hpp"
#include "forestcc/collectives.hpp"

namespace forestcc::executor {

namespace {

struct LocalInstance {};
using E4M3 = Fp8Format<4, 3, false, LocalInstance>;
using E5M2 = Fp8Format<5, 2, true, LocalInstance>;

// Tiles keep the partial result in L1 while the sources stream past it.
constexpr size_t kTile = 2048;

inline size_t tileEnd(size_t b, size_t count) { return count - b < kTile ? count : b + kTile; }

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
      const size_t e = tileEnd(b, count);
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
    const size_t e = tileEnd(b, count);
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

// ---- 16- and 8-bit floats: widened to float32, reduced there, narrowed once ----
// The scalar conversions (codecs: widen and narrow arrays) define the results; every level runs
// them, and the vector forms below must give their bits.

inline float floatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t bitsOfFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Bf16Codec {
  static void widen(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(in[i]);
  }
  static void narrow(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = floatToBf16(in[i]);
  }
};

// float16 through _Float16 conversions: library calls at x86-64-v2, one F16C instruction above
// (round to nearest even either way).
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

// ---- Vector forms (AVX2: 8 float32 lanes; AVX-512: 16) of the conversions above ----
#if defined(__AVX512F__)
using Vi = __m512i;
using Vf = __m512;
constexpr size_t kLanes = 16;
inline Vi set1(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
inline Vi andV(Vi a, Vi b) { return _mm512_and_si512(a, b); }
inline Vi orV(Vi a, Vi b) { return _mm512_or_si512(a, b); }
inline Vi addV(Vi a, Vi b) { return _mm512_add_epi32(a, b); }
inline Vi subV(Vi a, Vi b) { return _mm512_sub_epi32(a, b); }
template <int k> inline Vi shl(Vi a) { return _mm512_slli_epi32(a, k); }
template <int k> inline Vi shr(Vi a) { return _mm512_srli_epi32(a, k); }
// Lanes where the condition holds take `yes`. Comparisons are unsigned.
inline Vi pickEq(Vi a, Vi b, Vi yes, Vi no) { return _mm512_mask_blend_epi32(_mm512_cmpeq_epu32_mask(a, b), no, yes); }
inline Vi pickGt(Vi a, Vi b, Vi yes, Vi no) { return _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(a, b), no, yes); }
inline Vf asFloat(Vi a) { return _mm512_castsi512_ps(a); }
inline Vi asInt(Vf a) { return _mm512_castps_si512(a); }
inline Vf toFloatV(Vi a) { return _mm512_cvtepi32_ps(a); }
inline Vf mulV(Vf a, Vf b) { return _mm512_mul_ps(a, b); }
inline Vi roundEvenToInt(Vf a) {
  return _mm512_cvtt_roundps_epi32(_mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                   _MM_FROUND_NO_EXC);
}
inline Vi loadBytes(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void storeBytes(uint8_t* p, Vi v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }
#elif defined(__AVX2__)
using Vi = __m256i;
using Vf = __m256;
constexpr size_t kLanes = 8;
inline Vi set1(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
inline Vi andV(Vi a, Vi b) { return _mm256_and_si256(a, b); }
inline Vi orV(Vi a, Vi b) { return _mm256_or_si256(a, b); }
inline Vi addV(Vi a, Vi b) { return _mm256_add_epi32(a, b); }
inline Vi subV(Vi a, Vi b) { return _mm256_sub_epi32(a, b); }
template <int k> inline Vi shl(Vi a) { return _mm256_slli_epi32(a, k); }
template <int k> inline Vi shr(Vi a) { return _mm256_srli_epi32(a, k); }
inline Vi pickEq(Vi a, Vi b, Vi yes, Vi no) { return _mm256_blendv_epi8(no, yes, _mm256_cmpeq_epi32(a, b)); }
// Unsigned a > b: flip the sign bits and compare signed.
inline Vi pickGt(Vi a, Vi b, Vi yes, Vi no) {
  const Vi flip = set1(0x80000000u);
  return _mm256_blendv_epi8(no, yes, _mm256_cmpgt_epi32(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip)));
}
inline Vf asFloat(Vi a) { return _mm256_castsi256_ps(a); }
inline Vi asInt(Vf a) { return _mm256_castps_si256(a); }
inline Vf toFloatV(Vi a) { return _mm256_cvtepi32_ps(a); }
inline Vf mulV(Vf a, Vf b) { return _mm256_mul_ps(a, b); }
inline Vi roundEvenToInt(Vf a) { return _mm256_cvttps_epi32(_mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
inline Vi loadBytes(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline void storeBytes(uint8_t* p, Vi v) {
  // The low byte of each 32-bit lane, in order, into 8 bytes.
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(v, pick);
  const __m128i lo = _mm256_castsi256_si128(b);
  const __m128i hi = _mm256_extracti128_si256(b, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_unpacklo_epi32(lo, hi));
}
#endif

#if defined(__AVX2__)
// Fmt::toFloat of the byte in each lane.
template <class Fmt>
Vi fp8ToFloatBits(Vi v) {
  constexpr int kMan = Fmt::kManBits;
  constexpr uint32_t kBias = Fmt::kBias;
  const Vi sign = shl<24>(andV(v, set1(0x80)));
  const Vi mag = andV(v, set1(0x7f));
  const Vi normal = shl<23 - kMan>(addV(mag, set1((127 - kBias) << kMan)));
  // Zero and subnormals: mag * 2^(1 - bias - ManBits), exact in float32.
  const Vf scale = asFloat(set1((127 + 1 - kBias - kMan) << 23));
  const Vi subnormal = asInt(mulV(toFloatV(mag), scale));
  Vi bits = pickGt(set1(1u << kMan), mag, subnormal, normal);
  if constexpr (Fmt::kIeeeSpecials) {
    bits = pickGt(mag, set1(Fmt::kInfinity - 1u), set1(0x7fc00000u), bits);
    bits = pickEq(mag, set1(Fmt::kInfinity), set1(0x7f800000u), bits);
  } else {
    bits = pickEq(mag, set1(Fmt::kNan), set1(0x7fc00000u), bits);
  }
  return orV(bits, sign);
}

// Fmt::fromFloat of the float32 bits in each lane (the code in the lane's low byte).
template <class Fmt>
Vi floatBitsToFp8(Vi u) {
  constexpr int kMan = Fmt::kManBits;
  constexpr int kDrop = 23 - kMan;
  constexpr uint32_t kBias = Fmt::kBias;
  constexpr uint32_t kMinNormal = (127 - kBias + 1) << 23;
  const Vi sign = andV(shr<24>(u), set1(0x80));
  const Vi a = andV(u, set1(0x7fffffffu));
  // At or above the smallest normal: round the bits to nearest even at the last fp8 place, rebias.
  const Vi r = addV(addV(a, set1((1u << (kDrop - 1)) - 1)), andV(shr<kDrop>(a), set1(1)));
  Vi normal = subV(shr<kDrop>(r), set1((127 - kBias) << kMan));
  normal = pickGt(normal, set1(Fmt::kMaxFinite), set1(Fmt::kOverflow), normal);
  // Below it: the number of quanta 2^(1 - bias - ManBits), rounded to nearest even. Multiplying by
  // a power of two is exact here (float32 subnormals, counted as 0 by fromFloat, round to 0 too).
  const Vf perQuantum = asFloat(set1((127 - 1 + kBias + kMan) << 23));
  const Vi small = roundEvenToInt(mulV(asFloat(a), perQuantum));
  Vi code = pickGt(set1(kMinNormal), a, small, normal);
  code = pickGt(a, set1(0x7f800000u), set1(Fmt::kNan), code);
  return orV(code, sign);
}

// bfloat16 bits of each lane's float, as floatToBf16 (not VCVTNEPS2BF16, which flushes subnormals).
inline Vi floatToBf16Bits(Vf x) {
  const Vi u = asInt(x);
  const Vi odd = andV(shr<16>(u), set1(1));
  const Vi rounded = addV(u, addV(set1(0x7fff), odd));
  return shr<16>(pickGt(andV(u, set1(0x7fffffffu)), set1(0x7f800000u), orV(u, set1(0x400000)), rounded));
}

// Vector codecs: load kLanes elements as float32 lanes, store kLanes lanes narrowed; Scalar is
// the codec whose bits they give.
struct Bf16Vector {
  using Scalar = Bf16Codec;
#if defined(__AVX512F__)
  static Vf load(const uint16_t* p) {
    return asFloat(shl<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))));
  }
  static void store(uint16_t* p, Vf v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(floatToBf16Bits(v)));
  }
#else
  static Vf load(const uint16_t* p) {
    return asFloat(shl<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  }
  static void store(uint16_t* p, Vf v) {
    // packus packs within 128-bit halves: the 8 results are quadwords 0 and 2.
    const Vi bits = floatToBf16Bits(v);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
#endif
};

struct F16Vector {
  using Scalar = F16Codec;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(__AVX512F__)
  static Vf load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(uint16_t* p, Vf v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, kRound)); }
#else
  static Vf load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(uint16_t* p, Vf v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kRound)); }
#endif
};

template <class Fmt>
struct Fp8Vector {
  using Scalar = Fmt;
  static Vf load(const uint8_t* p) { return asFloat(fp8ToFloatBits<Fmt>(loadBytes(p))); }
  static void store(uint8_t* p, Vf v) { storeBytes(p, floatBitsToFp8<Fmt>(asInt(v))); }
};

// Each vector of every source is loaded and combined in registers, and the result narrowed and
// stored: no float32 copy goes through memory. Sources in the order given; dst may alias one
// (a vector of every source is read before its result is stored). The last count % kLanes
// elements go one at a time through the scalar codec.
template <class Vec, class T, class F>
void reduceWidened(T* dst, const T* const* s, int n, size_t count, F f) {
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    Vf acc = Vec::load(s[0] + i);
    for (int j = 1; j < n; ++j) acc = f(acc, Vec::load(s[j] + i));
    Vec::store(dst + i, acc);
  }
  for (; i < count; ++i) {
    float acc, x;
    Vec::Scalar::widen(s[0] + i, &acc, 1);
    for (int j = 1; j < n; ++j) {
      Vec::Scalar::widen(s[j] + i, &x, 1);
      acc = f(acc, x);
    }
    Vec::Scalar::narrow(&acc, dst + i, 1);
  }
}

template <class Vec, class T>
void divideWidened(T* p, size_t count, int divisor) {
  const float d = static_cast<float>(divisor);
  const Vf dv = asFloat(set1(bitsOfFloat(d)));
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) Vec::store(p + i, Vec::load(p + i) / dv);
  for (; i < count; ++i) {
    float x;
    Vec::Scalar::widen(p + i, &x, 1);
    x /= d;
    Vec::Scalar::narrow(&x, p + i, 1);
  }
}

using F16Kernel = F16Vector;
using Bf16Kernel = Bf16Vector;
using E4M3Kernel = Fp8Vector<E4M3>;
using E5M2Kernel = Fp8Vector<E5M2>;
#else  // x86-64-v2: tiles widened into float32 arrays, reduced there, narrowed once

template <class Codec, class T, class F>
void reduceWidened(T* dst, const T* const* s, int n, size_t count, F f) {
  alignas(64) float acc[kTile];
  alignas(64) float tmp[kTile];
  for (size_t b = 0; b < count; b += kTile) {
    const size_t len = tileEnd(b, count) - b;
    Codec::widen(s[0] + b, acc, len);
    for (int j = 1; j < n; ++j) {
      Codec::widen(s[j] + b, tmp, len);
      for (size_t i = 0; i < len; ++i) acc[i] = f(acc[i], tmp[i]);
    }
    Codec::narrow(acc, dst + b, len);
  }
}

template <class Codec, class T>
void divideWidened(T* p, size_t count, int divisor) {
  alignas(64) float tmp[kTile];
  const float d = static_cast<float>(divisor);
  for (size_t b = 0; b < count; b += kTile) {
    const size_t len = tileEnd(b, count) - b;
    Codec::widen(p + b, tmp, len);
    for (size_t i = 0; i < len; ++i) tmp[i] /= d;
    Codec::narrow(tmp, p + b, len);
  }
}

using F16Kernel = F16Codec;
using Bf16Kernel = Bf16Codec;
using E4M3Kernel = E4M3;
using E5M2Kernel = E5M2;
#endif

template <class F>
void dispatchType(void* dst, const void* const* srcs, int n, size_t count, DataType type, F f) {
  switch (type) {
    case DataType::Int8: return reduceWrapping(static_cast<int8_t*>(dst), reinterpret_cast<const int8_t* const*>(srcs), n, count, f);
    case DataType::Uint8: return reduceNative(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
    case DataType::Int32: return reduceWrapping(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t* const*>(srcs), n, count, f);
    case DataType::Uint32: return reduceNative(static_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t* const*>(srcs), n, count, f);
    case DataType::Int64: return reduceWrapping(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t* const*>(srcs), n, count, f);
    case DataType::Uint64: return reduceNative(static_cast<uint64_t*>(dst), reinterpret_cast<const uint64_t* const*>(srcs), n, count, f);
    case DataType::Float16: return reduceWidened<F16Kernel>(static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(srcs), n, count, f);
    case DataType::BFloat16: return reduceWidened<Bf16Kernel>(static_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t* const*>(srcs), n, count, f);
    case DataType::Float8E4M3: return reduceWidened<E4M3Kernel>(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
    case DataType::Float8E5M2: return reduceWidened<E5M2Kernel>(static_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t* const*>(srcs), n, count, f);
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

}  // namespace

namespace FORESTCC_REDUCE_ISA {

// reduce_kernels.hpp's reduceElements for n >= 2 and count >= 1.
void reduceElements(void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op) {
  // In the order given (see reduceNative; reduceWidened widens every source before it writes).
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Avg: return dispatchType(dst, srcs, n, count, type, SumF{});
    case ReduceOp::Prod: return dispatchType(dst, srcs, n, count, type, ProdF{});
    case ReduceOp::Min: return dispatchOrdered(dst, srcs, n, count, type, MinF{});
    case ReduceOp::Max: return dispatchOrdered(dst, srcs, n, count, type, MaxF{});
  }
}

// reduce_kernels.hpp's divideElements for divisor != 1 and count >= 1.
void divideElements(void* data, size_t count, DataType type, int divisor) {
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
    case DataType::Float16: return divideWidened<F16Kernel>(static_cast<uint16_t*>(data), count, divisor);
    case DataType::BFloat16: return divideWidened<Bf16Kernel>(static_cast<uint16_t*>(data), count, divisor);
    case DataType::Float8E4M3: return divideWidened<E4M3Kernel>(static_cast<uint8_t*>(data), count, divisor);
    case DataType::Float8E5M2: return divideWidened<E5M2Kernel>(static_cast<uint8_t*>(data), count, divisor);
  }
}

}  // namespace FORESTCC_REDUCE_ISA

}  // namespace forestcc::executor
