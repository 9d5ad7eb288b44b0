// NCCL's data types in forestcc's terms. Every ncclDataType_t runs natively: the ten forestcc
// knows directly, and the two fp8 formats as bytes where nothing is reduced, widened to float32
// and narrowed back (one rounding) where something is.
#pragma once

#include <cstddef>

#include "forestcc/collectives.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

struct TypeInfo {
  DataType type;      // what forestcc moves (uint8 for fp8)
  DataType reduceAs;  // what forestcc reduces (float32 for fp8)
  size_t size;        // bytes per element
  bool fp8;
};

TypeInfo typeInfo(ncclDataType_t type, const char* what);  // throws InvalidArgument when out of range
const char* typeName(ncclDataType_t type);

// Conversions between an NCCL type and float64 values (fp8 needs them; PreMulSum's scalar too).
void widenToFloat(const void* in, float* out, size_t count, ncclDataType_t type);   // fp8 only
void narrowFromFloat(const float* in, void* out, size_t count, ncclDataType_t type);  // fp8 only
// out[i] = in[i] * factor, computed in the element type (integers wrap, as a multiply on the GPU does).
// `factor` points to one element of `type`.
void scaleElements(const void* in, void* out, size_t count, ncclDataType_t type, const void* factor);

}  // namespace forestcc::nccl
