// One NCCL operation on forestcc's C++ collective API. Most map one to one; a PreMulSum operator
// reduces through a staging buffer (the scaled input).
#include <cstring>
#include <string>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/operation.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

const char* operationName(OpKind kind) {
  switch (kind) {
#define FORESTCC_NCCL_NAME(name) \
  case OpKind::name: return #name;
    FORESTCC_NCCL_OPERATIONS(FORESTCC_NCCL_NAME)
#undef FORESTCC_NCCL_NAME
  }
  return "?";
}

bool reduces(OpKind k) { return k == OpKind::AllReduce || k == OpKind::Reduce || k == OpKind::ReduceScatter; }
bool pointToPoint(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

namespace {

bool rootedKind(OpKind k) {
  return k == OpKind::Broadcast || k == OpKind::Reduce || k == OpKind::Gather || k == OpKind::Scatter;
}

// Elements of the send and receive buffers on this rank (0 where the rank passes none).
void bufferCounts(const Operation& op, size_t* in, size_t* out) {
  const size_t n = static_cast<size_t>(op.comm->size), c = op.count;
  const bool root = op.comm->rank == op.root;
  switch (op.kind) {
    case OpKind::AllReduce: *in = c; *out = c; return;
    case OpKind::Broadcast: *in = root ? c : 0; *out = c; return;
    case OpKind::Reduce: *in = c; *out = root ? c : 0; return;
    case OpKind::AllGather: *in = c; *out = c * n; return;
    case OpKind::ReduceScatter: *in = c * n; *out = c; return;
    case OpKind::AlltoAll: *in = c * n; *out = c * n; return;
    case OpKind::Gather: *in = c; *out = root ? c * n : 0; return;
    case OpKind::Scatter: *in = root ? c * n : 0; *out = c; return;
    case OpKind::Send: *in = c; *out = 0; return;
    case OpKind::Recv: *in = 0; *out = c; return;
  }
}

Tensor tensor(const void* p, size_t count, DataType t) { return Tensor(p, count, t); }

// Runs a reducing collective with `op` on buffers of forestcc type `t` (the staged or the caller's).
void runReduce(Collectives& coll, OpKind kind, const void* in, void* out, size_t inCount, size_t outCount,
               DataType t, ReduceOp op, int root, bool isRoot) {
  switch (kind) {
    case OpKind::AllReduce: coll.allReduce(tensor(in, inCount, t), tensor(out, outCount, t), op); return;
    case OpKind::ReduceScatter: coll.reduceScatter(tensor(in, inCount, t), tensor(out, outCount, t), op); return;
    case OpKind::Reduce: {
      // forestcc's reduce takes an output on every rank (a rank's partial result may pass through
      // it); NCCL lets ranks other than the root pass none, so they lend scratch.
      if (isRoot) return void(coll.reduce(tensor(in, inCount, t), tensor(out, outCount, t), root, op));
      thread_local std::vector<uint8_t> scratch;
      scratch.resize(inCount * elementSize(t));
      coll.reduce(tensor(in, inCount, t), tensor(scratch.data(), inCount, t), root, op);
      return;
    }
    default: throw NcclError(ncclInternalError, "runReduce: not a reduction");
  }
}

}  // namespace

void checkOperation(const Operation& op, const char* call) {
  if (!op.comm) badArgument("comm is NULL");
  // Refused by the call itself, also where it would run in the background (non-blocking config).
  if (op.comm->finalized()) refuse("the communicator was finalized (ncclCommFinalize)");
  const TypeInfo info = typeInfo(op.type, call);
  (void)info;
  const int n = op.comm->size;
  if (rootedKind(op.kind) && (op.root < 0 || op.root >= n))
    badArgument("root " + std::to_string(op.root) + " is out of range (0.." + std::to_string(n - 1) + ")");
  if (pointToPoint(op.kind) && (op.peer < 0 || op.peer >= n))
    badArgument("peer " + std::to_string(op.peer) + " is out of range (0.." + std::to_string(n - 1) + ")");
  if (reduces(op.kind)) op.comm->redOps.resolve(op.op, op.type, call);  // throws for an unknown op
  size_t in = 0, out = 0;
  bufferCounts(op, &in, &out);
  if (in && !op.send) badArgument("sendbuff is NULL with " + std::to_string(in) + " elements to send");
  if (out && !op.recv) badArgument("recvbuff is NULL with " + std::to_string(out) + " elements to receive");
  // GPU buffers are not refused here: the group they are in may forward (forwarding.cpp decides).
}

void runNatively(const Operation& op) {
  ncclComm& comm = *op.comm;
  Collectives& coll = comm.collectives();
  const TypeInfo info = typeInfo(op.type, operationName(op.kind));
  const DataType t = info.type;
  const bool isRoot = comm.rank == op.root;
  size_t inCount = 0, outCount = 0;
  bufferCounts(op, &inCount, &outCount);

  if (reduces(op.kind)) {
    const ResolvedOp r = comm.redOps.resolve(op.op, op.type, operationName(op.kind));
    if (r.preMultiply) {
      std::vector<uint8_t> scaled(inCount * info.size);
      scaleElements(op.send, scaled.data(), inCount, op.type, r.factor.data());
      runReduce(coll, op.kind, scaled.data(), op.recv, inCount, outCount, t, ReduceOp::Sum, op.root, isRoot);
      return;
    }
    runReduce(coll, op.kind, op.send, op.recv, inCount, outCount, t, r.op, op.root, isRoot);
    return;
  }

  switch (op.kind) {
    case OpKind::Broadcast:
      // forestcc broadcasts in place: the root's data goes to recvbuff first.
      if (isRoot && op.send != op.recv && op.count) std::memmove(op.recv, op.send, op.count * info.size);
      coll.broadcast(tensor(op.recv, outCount, t), op.root);
      return;
    case OpKind::AllGather: coll.allGather(tensor(op.send, inCount, t), tensor(op.recv, outCount, t)); return;
    case OpKind::AlltoAll: coll.allToAll(tensor(op.send, inCount, t), tensor(op.recv, outCount, t)); return;
    case OpKind::Gather:
      coll.gather(tensor(op.send, inCount, t), isRoot ? tensor(op.recv, outCount, t) : Tensor::absent(), op.root);
      return;
    case OpKind::Scatter:
      coll.scatter(isRoot ? tensor(op.send, inCount, t) : Tensor::absent(), tensor(op.recv, outCount, t), op.root);
      return;
    // A batch of one (groups.cpp runs a group's as one batch): a message to oneself needs its
    // pair in the same group, which the batch says.
    case OpKind::Send: coll.sendRecv({SendMessage{op.peer, op.send, op.count * info.size}}, {}); return;
    case OpKind::Recv: coll.sendRecv({}, {RecvMessage{op.peer, op.recv, op.count * info.size}}); return;
    default: throw NcclError(ncclInternalError, "runNatively: unhandled operation");
  }
}

}  // namespace forestcc::nccl
