// Reduction operators: NCCL's five built-ins and the PreMulSum operators a communicator creates
// (values from ncclNumOps on, as NCCL numbers them), each for one datatype.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "forestcc/collectives.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

// What a call's ncclRedOp_t means here: a forestcc operator, and for PreMulSum the factor each
// rank multiplies its input by first (one element of the call's type).
struct ResolvedOp {
  ReduceOp op = ReduceOp::Sum;
  bool preMultiply = false;
  std::array<uint8_t, 8> factor{};  // HostImmediate: the value (a Device scalar is read by the call)
  bool custom = false;  // made by ncclRedOpCreatePreMulSum (the fallback needs its own copy)
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  const void* scalar = nullptr;  // residence Device: read at each call (host or GPU memory)
};

class RedOpTable {
 public:
  ncclRedOp_t create(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence);
  void destroy(ncclRedOp_t op);
  // Throws InvalidArgument for an unknown operator or one made for another datatype.
  ResolvedOp resolve(ncclRedOp_t op, ncclDataType_t type, const char* call) const;

 private:
  struct Custom {
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    const void* scalar;                // Device residence: the caller's memory, read at each call
    std::array<uint8_t, 8> immediate;  // HostImmediate: the value read at creation
  };
  mutable std::mutex mu_;
  std::map<int, Custom> custom_;
  int next_ = ncclNumOps;
};

const char* opName(ncclRedOp_t op);

}  // namespace forestcc::nccl
