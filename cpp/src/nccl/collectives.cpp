// The NCCL collectives and point-to-point calls: each becomes an Operation, checked, then run at
// once or kept for ncclGroupEnd (groups.cpp). With no GPU, the stream is an opaque handle and the
// call has completed when it returns (a later stream synchronisation finds nothing to wait for).
#include <cstring>
#include <string>

#include "nccl/operation.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::Operation;
using forestcc::nccl::OpKind;

namespace {

ncclResult_t call(const Operation& op, const char* name) {
  return forestcc::nccl::guarded(op.comm, name, [&] { return forestcc::nccl::submit(op, name); });
}

Operation make(OpKind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
               cudaStream_t stream) {
  Operation op;
  op.kind = kind;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.type = type;
  op.comm = comm;
  op.stream = stream;
  return op;
}

Operation withOp(Operation o, ncclRedOp_t op) {
  o.op = op;
  return o;
}
Operation withRoot(Operation o, int root) {
  o.root = root;
  return o;
}

// The per-call hints of the nccl*Config variants: resource limits mean nothing on host memory; an
// NCCL algorithm selection is NCCL's own, so only the fallback can honour it.
ncclResult_t callWithConfig(Operation op, const ncclCollConfig_t* config, const char* name) {
  return forestcc::nccl::guarded(op.comm, name, [&] {
    if (config) {
      if (config->magic != NCCL_API_MAGIC)
        forestcc::nccl::badArgument("config was not initialised with NCCL_COLLCONFIG_INITIALIZER");
      const bool hasSelection = config->size >= offsetof(ncclCollConfig_t, forceAlgSelection) &&
                                config->algSelection && config->algSelection[0];
      if (hasSelection) op.needsFallback = "its config selects an NCCL algorithm (algSelection)";
    }
    return forestcc::nccl::submit(op, name);
  });
}

}  // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return call(withOp(make(OpKind::AllReduce, sendbuff, recvbuff, count, datatype, comm, stream), op), "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return call(withRoot(make(OpKind::Broadcast, sendbuff, recvbuff, count, datatype, comm, stream), root),
              "ncclBroadcast");
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return call(withRoot(make(OpKind::Broadcast, buff, buff, count, datatype, comm, stream), root), "ncclBcast");
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return call(withRoot(withOp(make(OpKind::Reduce, sendbuff, recvbuff, count, datatype, comm, stream), op), root),
              "ncclReduce");
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return call(make(OpKind::AllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return call(withOp(make(OpKind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, comm, stream), op),
              "ncclReduceScatter");
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  return call(make(OpKind::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream), "ncclAlltoAll");
}

// RCCL's spelling, exported as well so programs built against either name find it.
ncclResult_t ncclAllToAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  return call(make(OpKind::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream), "ncclAllToAll");
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return call(withRoot(make(OpKind::Gather, sendbuff, recvbuff, count, datatype, comm, stream), root), "ncclGather");
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return call(withRoot(make(OpKind::Scatter, sendbuff, recvbuff, count, datatype, comm, stream), root),
              "ncclScatter");
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  Operation op = make(OpKind::Send, sendbuff, nullptr, count, datatype, comm, stream);
  op.peer = peer;
  return call(op, "ncclSend");
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  Operation op = make(OpKind::Recv, nullptr, recvbuff, count, datatype, comm, stream);
  op.peer = peer;
  return call(op, "ncclRecv");
}

ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(withOp(make(OpKind::AllReduce, sendbuff, recvbuff, count, datatype, comm, stream), op), config,
                        "ncclAllReduceConfig");
}

ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(withRoot(make(OpKind::Broadcast, sendbuff, recvbuff, count, datatype, comm, stream), root),
                        config, "ncclBroadcastConfig");
}

ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                              const ncclCollConfig_t* config) {
  return callWithConfig(
      withRoot(withOp(make(OpKind::Reduce, sendbuff, recvbuff, count, datatype, comm, stream), op), root), config,
      "ncclReduceConfig");
}

ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(make(OpKind::AllGather, sendbuff, recvbuff, sendcount, datatype, comm, stream), config,
                        "ncclAllGatherConfig");
}

ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                     const ncclCollConfig_t* config) {
  return callWithConfig(withOp(make(OpKind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, comm, stream), op),
                        config, "ncclReduceScatterConfig");
}

ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(make(OpKind::AlltoAll, sendbuff, recvbuff, count, datatype, comm, stream), config,
                        "ncclAlltoAllConfig");
}

ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(withRoot(make(OpKind::Gather, sendbuff, recvbuff, count, datatype, comm, stream), root), config,
                        "ncclGatherConfig");
}

ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return callWithConfig(withRoot(make(OpKind::Scatter, sendbuff, recvbuff, count, datatype, comm, stream), root),
                        config, "ncclScatterConfig");
}

}  // extern "C"
