// NCCL's data types as forestcc's, and PreMulSum's scaling in each (fp8 through float32, one rounding:
// core/fp8.hpp).
#include "nccl/data_types.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "core/bf16.hpp"
#include "core/fp8.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

// Indexed by ncclDataType_t (nccl.h: ncclInt8 = 0 ... ncclBfloat16 = 9, ncclFloat8e4m3 = 10,
// ncclFloat8e5m2 = 11, as in NCCL 2.32).
constexpr DataType kTypes[ncclNumTypes] = {
    DataType::Int8,    DataType::Uint8,   DataType::Int32,   DataType::Uint32,   DataType::Int64,      DataType::Uint64,
    DataType::Float16, DataType::Float32, DataType::Float64, DataType::BFloat16, DataType::Float8E4M3, DataType::Float8E5M2,
};
const char* const kNames[ncclNumTypes] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                          "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                          "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};

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

template <class Fp8>
void scaleFp8(const void* in, void* out, size_t n, const void* factor) {
  const float k = Fp8::toFloat(*static_cast<const uint8_t*>(factor));
  const uint8_t* a = static_cast<const uint8_t*>(in);
  uint8_t* b = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < n; ++i) b[i] = Fp8::fromFloat(Fp8::toFloat(a[i]) * k);
}

}  // namespace

TypeInfo typeInfo(ncclDataType_t type, const char* what) {
  if (static_cast<int>(type) < 0 || type >= ncclNumTypes)
    badArgument(std::string(what) + ": datatype " + std::to_string(static_cast<int>(type)) +
                " is not an ncclDataType_t (0.." + std::to_string(ncclNumTypes - 1) + ")");
  return {kTypes[type], elementSize(kTypes[type])};
}

const char* typeName(ncclDataType_t type) {
  return static_cast<int>(type) >= 0 && type < ncclNumTypes ? kNames[type] : "an invalid datatype";
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
    case ncclFloat8e4m3: return scaleFp8<Float8E4M3>(in, out, count, factor);
    case ncclFloat8e5m2: return scaleFp8<Float8E5M2>(in, out, count, factor);
    default: badArgument("datatype " + std::to_string(static_cast<int>(type)) + " is not an ncclDataType_t");
  }
}

}  // namespace forestcc::nccl
