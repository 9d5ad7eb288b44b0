// One NCCL call, as data: what ncclGroupEnd runs (or forwards) for every call made inside a group,
// and what a call outside a group runs at once.
#pragma once

#include <cstddef>
#include <vector>

#include "nccl/include/nccl.h"

struct ncclComm;

namespace forestcc::nccl {

#define FORESTCC_NCCL_OPERATIONS(X)                                                                  \
  X(AllReduce) X(Broadcast) X(Reduce) X(AllGather) X(ReduceScatter) X(AlltoAll) X(Gather) X(Scatter) \
  X(Send) X(Recv)

enum class OpKind {
#define FORESTCC_NCCL_ENUM(name) name,
  FORESTCC_NCCL_OPERATIONS(FORESTCC_NCCL_ENUM)
#undef FORESTCC_NCCL_ENUM
};

struct Operation {
  OpKind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // NCCL's count argument (per rank for all_gather, reduce_scatter, all_to_all)
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = -1;  // rooted collectives
  int peer = -1;  // send / recv
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = -1;  // the CUDA device of its buffers (checkOperation), -1: host memory
  const char* needsFallback = nullptr;  // why only the fallback can run it (an NCCL algorithm selection)
};

const char* operationName(OpKind kind);  // "AllReduce", ... (FORESTCC_NCCL_FORCE uses these names)
bool reduces(OpKind kind);
bool pointToPoint(OpKind kind);

// Checks the arguments that need no peer (types, ops, roots, peers, pointers, where the buffers
// live) and throws with a message naming the argument; `call` is the entry point's name for the
// message. Returns the CUDA device of the buffers the rank passes, -1 for host memory.
int checkOperation(const Operation& op, const char* call);
// Runs it on forestcc, on this thread (a send or recv alone: see groups.cpp for several).
void runNatively(const Operation& op);
// runNatively on the operation's device, refusing the call (Collectives::refuseCall) when it
// fails before the collective was reached (schedules/README.md, "Refused calls").
void runNativelyOrRefuse(const Operation& op);
// Runs sends and receives of one communicator as one point-to-point batch (point_to_point.cpp);
// one refused before forestcc has it is refused there (refusePointToPoint).
void runPointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops);
// The sends and receives of `ops` (of one communicator, which is usable) do not run on this rank:
// each still takes its place (Collectives::refuseSendRecv), so the messages that would have
// matched them fail on the peers instead of matching this rank's next ones. Never throws.
void refusePointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops) noexcept;
// Refuses a group whose sends and receives on one communicator mix host and GPU memory (a batch is
// one or the other), before anything runs or is forwarded.
void checkBatches(const std::vector<Operation>& ops);
// Runs a call made outside a group, or keeps it for ncclGroupEnd.
ncclResult_t submit(Operation op, const char* call);

}  // namespace forestcc::nccl
