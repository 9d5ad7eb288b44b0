// NCCL's data types in forestcc's terms. Every ncclDataType_t is a forestcc DataType (fp8 included:
// ncclFloat8e4m3 is float8_e4m3fn, ncclFloat8e5m2 float8_e5m2), so every one runs natively.
#pragma once

#include <cstddef>

#include "forestcc/collectives.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

struct TypeInfo {
  DataType type;
  size_t size;  // bytes per element
};

TypeInfo typeInfo(ncclDataType_t type, const char* what);  // throws InvalidArgument when out of range
const char* typeName(ncclDataType_t type);

// out[i] = in[i] * factor, computed in the element type (integers wrap, as a multiply on the GPU does).
// `factor` points to one element of `type`.
void scaleElements(const void* in, void* out, size_t count, ncclDataType_t type, const void* factor);

}  // namespace forestcc::nccl
