// The shim's element arithmetic: fp8 <-> float32 (round to nearest even; e4m3 is the "fn" format
// with no infinity, saturating to NaN as NCCL's conversions do) and PreMulSum's scaling.
#include "nccl/data_types.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

const TypeInfo kTypes[ncclNumTypes] = {
    {DataType::Int8, DataType::Int8, 1, false},          {DataType::Uint8, DataType::Uint8, 1, false},
    {DataType::Int32, DataType::Int32, 4, false},        {DataType::Uint32, DataType::Uint32, 4, false},
    {DataType::Int64, DataType::Int64, 8, false},        {DataType::Uint64, DataType::Uint64, 8, false},
    {DataType::Float16, DataType::Float16, 2, false},    {DataType::Float32, DataType::Float32, 4, false},
    {DataType::Float64, DataType::Float64, 8, false},    {DataType::BFloat16, DataType::BFloat16, 2, false},
    {DataType::Uint8, DataType::Float32, 1, true},       {DataType::Uint8, DataType::Float32, 1, true},
};
const char* const kNames[ncclNumTypes] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                          "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                          "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};

// An fp8 format: exponent and mantissa bits, the exponent bias, and whether the all-ones exponent
// is a normal binade (e4m3fn: only S.1111.111 is NaN, no infinity) or inf/NaN (e5m2, IEEE-like).
struct Fp8Format {
  int expBits, manBits, bias;
  bool ieeeSpecials;
};
constexpr Fp8Format kE4M3{4, 3, 7, false};
constexpr Fp8Format kE5M2{5, 2, 15, true};

float fp8ToFloat(uint8_t v, Fp8Format f) {
  const int sign = v >> 7;
  const int exp = (v >> f.manBits) & ((1 << f.expBits) - 1);
  const int man = v & ((1 << f.manBits) - 1);
  const int maxExp = (1 << f.expBits) - 1;
  float out;
  if (f.ieeeSpecials && exp == maxExp) {
    out = man ? NAN : INFINITY;
  } else if (!f.ieeeSpecials && exp == maxExp && man == (1 << f.manBits) - 1) {
    out = NAN;
  } else if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), 1 - f.bias - f.manBits);
  } else {
    out = std::ldexp(static_cast<float>(man + (1 << f.manBits)), exp - f.bias - f.manBits);
  }
  return sign ? -out : out;
}

uint8_t floatToFp8(float x, Fp8Format f) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const uint8_t nan = f.ieeeSpecials ? 0x7f : 0x7f;  // both formats: S.1111.111 / S.11111.11
  if (std::isnan(x)) return sign | nan;
  const float a = std::fabs(x);
  const int maxExp = (1 << f.expBits) - 1;
  // The largest finite value and the code for overflow (saturating to NaN for e4m3, inf for e5m2).
  const int topExp = f.ieeeSpecials ? maxExp - 1 : maxExp;
  const int topMan = f.ieeeSpecials ? (1 << f.manBits) - 1 : (1 << f.manBits) - 2;
  const float maxFinite = std::ldexp(static_cast<float>(topMan + (1 << f.manBits)), topExp - f.bias - f.manBits);
  const uint8_t overflow = f.ieeeSpecials ? static_cast<uint8_t>(maxExp << f.manBits) : nan;
  if (std::isinf(a)) return sign | overflow;
  // Quantise to the grid of the binade that holds `a` (subnormals share the lowest one).
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int unbiased = std::max(e - 1, 1 - f.bias);
  const float quantum = std::ldexp(1.0f, unbiased - f.manBits);
  const float q = std::nearbyint(a / quantum) * quantum;  // round half to even (default mode)
  if (q > maxFinite) return sign | overflow;
  if (q == 0) return sign;
  std::frexp(q, &e);
  unbiased = e - 1;
  if (unbiased < 1 - f.bias) {  // subnormal
    return sign | static_cast<uint8_t>(q / std::ldexp(1.0f, 1 - f.bias - f.manBits));
  }
  const int mant = static_cast<int>(q / std::ldexp(1.0f, unbiased - f.manBits)) - (1 << f.manBits);
  return sign | static_cast<uint8_t>(((unbiased + f.bias) << f.manBits) | mant);
}

float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

template <class T>
void scaleAs(const void* in, void* out, size_t n, const void* factor) {
  T k;
  std::memcpy(&k, factor, sizeof k);
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<T>(a[i] * k);
}

template <class T>
void scaleUnsignedWrap(const void* in, void* out, size_t n, const void* factor) {
  // Signed overflow is undefined in C++; multiply as unsigned and wrap like the hardware.
  using U = std::make_unsigned_t<T>;
  U k;
  std::memcpy(&k, factor, sizeof k);
  const U* a = static_cast<const U*>(in);
  U* b = static_cast<U*>(out);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<U>(a[i] * k);
}

}  // namespace

TypeInfo typeInfo(ncclDataType_t type, const char* what) {
  if (static_cast<int>(type) < 0 || type >= ncclNumTypes)
    badArgument(std::string(what) + ": datatype " + std::to_string(static_cast<int>(type)) +
                " is not an ncclDataType_t (0.." + std::to_string(ncclNumTypes - 1) + ")");
  return kTypes[type];
}

const char* typeName(ncclDataType_t type) {
  return static_cast<int>(type) >= 0 && type < ncclNumTypes ? kNames[type] : "an invalid datatype";
}

void widenToFloat(const void* in, float* out, size_t count, ncclDataType_t type) {
  const Fp8Format f = type == ncclFloat8e4m3 ? kE4M3 : kE5M2;
  const uint8_t* a = static_cast<const uint8_t*>(in);
  for (size_t i = 0; i < count; ++i) out[i] = fp8ToFloat(a[i], f);
}

void narrowFromFloat(const float* in, void* out, size_t count, ncclDataType_t type) {
  const Fp8Format f = type == ncclFloat8e4m3 ? kE4M3 : kE5M2;
  uint8_t* b = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < count; ++i) b[i] = floatToFp8(in[i], f);
}

void scaleElements(const void* in, void* out, size_t count, ncclDataType_t type, const void* factor) {
  switch (type) {
    case ncclInt8: return scaleUnsignedWrap<int8_t>(in, out, count, factor);
    case ncclUint8: return scaleAs<uint8_t>(in, out, count, factor);
    case ncclInt32: return scaleUnsignedWrap<int32_t>(in, out, count, factor);
    case ncclUint32: return scaleAs<uint32_t>(in, out, count, factor);
    case ncclInt64: return scaleUnsignedWrap<int64_t>(in, out, count, factor);
    case ncclUint64: return scaleAs<uint64_t>(in, out, count, factor);
    case ncclFloat32: return scaleAs<float>(in, out, count, factor);
    case ncclFloat64: return scaleAs<double>(in, out, count, factor);
    case ncclFloat16: {
      _Float16 k;
      std::memcpy(&k, factor, 2);
      const _Float16* a = static_cast<const _Float16*>(in);
      _Float16* b = static_cast<_Float16*>(out);
      for (size_t i = 0; i < count; ++i) b[i] = static_cast<_Float16>(static_cast<float>(a[i]) * static_cast<float>(k));
      return;
    }
    case ncclBfloat16: {
      uint16_t kb;
      std::memcpy(&kb, factor, 2);
      const float k = bf16ToFloat(kb);
      const uint16_t* a = static_cast<const uint16_t*>(in);
      uint16_t* b = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < count; ++i) b[i] = floatToBf16(bf16ToFloat(a[i]) * k);
      return;
    }
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: {
      const Fp8Format f = type == ncclFloat8e4m3 ? kE4M3 : kE5M2;
      const float k = fp8ToFloat(*static_cast<const uint8_t*>(factor), f);
      const uint8_t* a = static_cast<const uint8_t*>(in);
      uint8_t* b = static_cast<uint8_t*>(out);
      for (size_t i = 0; i < count; ++i) b[i] = floatToFp8(fp8ToFloat(a[i], f) * k, f);
      return;
    }
    default: badArgument("datatype " + std::to_string(static_cast<int>(type)) + " is not an ncclDataType_t");
  }
}

}  // namespace forestcc::nccl
