// ncclRedOpCreatePreMulSum / ncclRedOpDestroy and the table behind them.
#include "nccl/red_ops.hpp"

#include <cstring>
#include <string>

#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/cuda_driver.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

const char* opName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "a PreMulSum operator";
  }
}

ncclRedOp_t RedOpTable::create(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence) {
  const TypeInfo info = typeInfo(type, "ncclRedOpCreatePreMulSum");
  if (!scalar) badArgument("scalar is NULL");
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    badArgument("residence " + std::to_string(static_cast<int>(residence)) +
                " is neither ncclScalarDevice nor ncclScalarHostImmediate");
  // A device scalar is read when each call runs, as NCCL reads it (execute.cpp, runPreMulSum: from
  // GPU memory after the caller's stream, or from host memory, the host-pointer extension).
  if (residence == ncclScalarHostImmediate && cuda::deviceOf(scalar) >= 0)
    badArgument("the scalar is GPU memory but residence is ncclScalarHostImmediate (a host value read now); "
                "pass ncclScalarDevice for a scalar in GPU memory");
  Custom c{type, residence, scalar, {}};
  if (residence == ncclScalarHostImmediate) std::memcpy(c.immediate.data(), scalar, info.size);
  std::lock_guard<std::mutex> lock(mu_);
  if (next_ == ncclMaxRedOp) refuse("too many PreMulSum operators on this communicator");
  const int id = next_++;
  custom_[id] = c;
  return static_cast<ncclRedOp_t>(id);
}

void RedOpTable::destroy(ncclRedOp_t op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(op) < ncclNumOps)
    badArgument(std::string("op ") + opName(op) + " is built in; only operators from ncclRedOpCreatePreMulSum "
                "can be destroyed");
  if (!custom_.erase(op))
    badArgument("op " + std::to_string(static_cast<int>(op)) + " was not created on this communicator (or was "
                "destroyed already)");
}

ResolvedOp RedOpTable::resolve(ncclRedOp_t op, ncclDataType_t type, const char* call) const {
  ResolvedOp r;
  switch (op) {
    case ncclSum: r.op = ReduceOp::Sum; return r;
    case ncclProd: r.op = ReduceOp::Prod; return r;
    case ncclMax: r.op = ReduceOp::Max; return r;
    case ncclMin: r.op = ReduceOp::Min; return r;
    case ncclAvg: r.op = ReduceOp::Avg; return r;
    default: break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = custom_.find(op);
  if (it == custom_.end())
    badArgument(std::string(call) + ": op " + std::to_string(static_cast<int>(op)) +
                " is neither a built-in ncclRedOp_t nor a PreMulSum operator of this communicator");
  if (it->second.type != type)
    badArgument(std::string(call) + ": op " + std::to_string(static_cast<int>(op)) + " was created for " +
                typeName(it->second.type) + ", not " + typeName(type));
  r.preMultiply = r.custom = true;
  r.residence = it->second.residence;
  r.scalar = it->second.scalar;
  r.factor = it->second.immediate;  // a device scalar's value is read by the call (runPreMulSum)
  return r;
}

}  // namespace forestcc::nccl

using forestcc::nccl::guarded;

extern "C" ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                 ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpCreatePreMulSum", [&] {
    ncclComm::Use use(comm, "ncclRedOpCreatePreMulSum");
    if (!op) forestcc::nccl::badArgument("op is NULL");
    *op = comm->redOps.create(scalar, datatype, residence);
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpDestroy", [&] {
    ncclComm::Use use(comm, "ncclRedOpDestroy");
    comm->redOps.destroy(op);
    return ncclSuccess;
  });
}
