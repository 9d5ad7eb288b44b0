// One NCCL operation on forestcc's C++ collective API, on host or GPU memory. Most map one to one;
// a PreMulSum operator reduces through a staging buffer (the scaled input). On GPU memory the call
// is enqueued on the caller's stream and returns (forestcc's CUDA runner, docs/gpu.md).
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "nccl/comm.hpp"
#include "nccl/cuda_driver.hpp"
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

// Elements of the send and receive buffers on this rank (0 where the rank passes none); a count
// times the ranks that wraps around 64 bits is SIZE_MAX, which checkOperation refuses.
void bufferCounts(const Operation& op, size_t* in, size_t* out) {
  const size_t n = static_cast<size_t>(op.comm->size), c = op.count;
  size_t cn;
  if (__builtin_mul_overflow(c, n, &cn)) cn = SIZE_MAX;
  const bool root = op.comm->rank == op.root;
  switch (op.kind) {
    case OpKind::AllReduce: *in = c; *out = c; return;
    case OpKind::Broadcast: *in = root ? c : 0; *out = c; return;
    case OpKind::Reduce: *in = c; *out = root ? c : 0; return;
    case OpKind::AllGather: *in = c; *out = cn; return;
    case OpKind::ReduceScatter: *in = cn; *out = c; return;
    case OpKind::AlltoAll: *in = cn; *out = cn; return;
    case OpKind::Gather: *in = c; *out = root ? cn : 0; return;
    case OpKind::Scatter: *in = root ? cn : 0; *out = c; return;
    case OpKind::Send: *in = c; *out = 0; return;
    case OpKind::Recv: *in = 0; *out = c; return;
  }
}

// Where one call runs: its buffers' memory and stream.
struct Placement {
  int device = -1;  // -1: host memory
  cudaStream_t stream = nullptr;
  Tensor tensor(const void* p, size_t count, DataType t) const {
    Tensor x(p, count, t);
    x.device = device;
    return x;
  }
  CallOptions options() const {
    CallOptions o;
    o.stream = stream;
    o.async = device >= 0;  // its Work: ncclCommGetAsyncError polls the last one (noteDeviceWork)
    return o;
  }
};

// Memory the shim lends a call where NCCL's arguments leave forestcc without a buffer of its own
// (a Reduce's output away from the root, an in-place form's staged input or discarded output):
// the communicator's lent memory (comm.hpp: lentHost, shared host memory, which host calls use
// before they return, one at a time; lentDevice, device_scratch.hpp). A call uses one at a time.
void* lent(ncclComm& comm, size_t bytes, const Placement& at) {
  if (at.device >= 0) return comm.lentDevice.get(bytes, at.device);
  if (!comm.lentHost || comm.lentHost->size() < bytes) {
    // Made before the old one goes, so the two never share an address (which a call's
    // publication tells buffers apart by); peers keep their mapping of the old until they drop it.
    const size_t size = std::max<size_t>({bytes, size_t(4096), comm.lentHost ? 2 * comm.lentHost->size() : 0});
    auto grown = std::make_unique<SharedAllocation>(size);
    comm.lentHost = std::move(grown);
  }
  return comm.lentHost->data();
}

// A copy of `bytes` at `src` in lent memory (on GPU memory, on the call's stream): what an
// in-place form of NCCL's reads where forestcc's collective is out of place. Ranks must agree on
// a call's placement (it is part of the plan), and NCCL's in-place forms are the root's alone.
const void* stagedCopy(ncclComm& comm, const void* src, size_t bytes, const Placement& at) {
  // The previous call may still use the lent GPU memory: on another stream than this copy's, only
  // the GPU's finishing it orders the two (a rare case: a rooted in-place call after one on
  // another stream).
  if (at.device >= 0 && comm.lastDeviceStream && *comm.lastDeviceStream != static_cast<void*>(at.stream))
    comm.collectives().synchronize();
  void* copy = lent(comm, bytes, at);
  if (at.device >= 0)
    cuda::copyOnStream(copy, src, bytes, at.stream, at.device);
  else
    std::memcpy(copy, src, bytes);
  return copy;
}

// A reducing collective with `op` on buffers of forestcc type `t` (the staged or the caller's).
// `preMultiplied`: a PreMulSum's sum of scaled inputs (CallOptions::preMultiplied).
Collectives::WorkPtr runReduce(ncclComm& comm, OpKind kind, const void* in, void* out, size_t inCount,
                               size_t outCount, DataType t, ReduceOp op, int root, bool isRoot, const Placement& at,
                               bool preMultiplied = false) {
  Collectives& coll = comm.collectives();
  CallOptions options = at.options();
  options.preMultiplied = preMultiplied;
  switch (kind) {
    case OpKind::AllReduce: return coll.allReduce(at.tensor(in, inCount, t), at.tensor(out, outCount, t), op, options);
    case OpKind::ReduceScatter:
      return coll.reduceScatter(at.tensor(in, inCount, t), at.tensor(out, outCount, t), op, options);
    case OpKind::Reduce: {
      // forestcc's reduce takes an output on every rank (a rank's partial result may pass through
      // it); NCCL lets ranks other than the root pass none, so they lend memory, and every rank
      // runs out of place: an in-place root's input is staged (PyTorch's reduce is in place).
      const size_t bytes = inCount * elementSize(t);
      if (!isRoot)
        return coll.reduce(at.tensor(in, inCount, t), at.tensor(lent(comm, bytes, at), inCount, t), root, op, options);
      if (in == out && bytes) in = stagedCopy(comm, in, bytes, at);
      return coll.reduce(at.tensor(in, inCount, t), at.tensor(out, outCount, t), root, op, options);
    }
    default: throw NcclError(ncclInternalError, "runReduce: not a reduction");
  }
}

// A PreMulSum operator's factor for this call: the value read at creation (HostImmediate), or a
// device scalar read now, once the caller's stream has reached the call (from GPU memory, or from
// host memory: the host-pointer extension).
std::array<uint8_t, 8> factorOf(const ResolvedOp& r, const TypeInfo& info, const Placement& at) {
  std::array<uint8_t, 8> factor = r.factor;
  if (r.residence != ncclScalarDevice) return factor;
  const int scalarDevice = cuda::deviceOf(r.scalar);
  if (scalarDevice >= 0)
    cuda::copyAfterStream(factor.data(), r.scalar, info.size, at.stream, scalarDevice);
  else
    std::memcpy(factor.data(), r.scalar, info.size);
  return factor;
}

// PreMulSum: each rank's input times its scalar, into a staging buffer the collective then sums.
// On GPU memory the shim has no kernel of its own, so the input makes a round trip through host
// memory: every earlier call of the communicator finishes first (the staging buffer is free), the
// caller's stream too (the input and a device scalar are written), the scalar is read (a device
// scalar when the call runs, as NCCL reads it), the scaled input is copied back and the sum is
// enqueued. Correct, and synchronous with the host: a slow path for a rare operator.
Collectives::WorkPtr runPreMulSum(ncclComm& comm, const Operation& op, const ResolvedOp& r, const TypeInfo& info,
                                  size_t inCount, size_t outCount, const Placement& at) {
  const bool isRoot = comm.rank == op.root;
  const size_t bytes = inCount * info.size;
  if (at.device < 0) {
    const std::array<uint8_t, 8> factor = factorOf(r, info, at);
    std::vector<uint8_t> scaled(bytes);
    scaleElements(op.send, scaled.data(), inCount, op.type, factor.data());
    return runReduce(comm, op.kind, scaled.data(), op.recv, inCount, outCount, info.type, ReduceOp::Sum, op.root,
                     isRoot, at, true);
  }
  comm.collectives().synchronize();
  std::vector<uint8_t> host(bytes);
  cuda::copyAfterStream(host.data(), op.send, bytes, at.stream, at.device);
  const std::array<uint8_t, 8> factor = factorOf(r, info, at);
  scaleElements(host.data(), host.data(), inCount, op.type, factor.data());
  void* staged = comm.premulScratch.get(bytes, at.device);
  cuda::copyAfterStream(staged, host.data(), bytes, at.stream, at.device);
  return runReduce(comm, op.kind, staged, op.recv, inCount, outCount, info.type, ReduceOp::Sum, op.root, isRoot, at,
                   true);
}

// The device of a buffer the rank passes (`elements` > 0), -1 for host memory, or none (-2).
constexpr int kNoBuffer = -2;
int bufferDevice(const void* p, size_t elements) { return elements && p ? cuda::deviceOf(p) : kNoBuffer; }

std::string describeMemory(int device) {
  return device >= 0 ? "GPU memory (device " + std::to_string(device) + ")" : "host memory";
}

}  // namespace

int checkOperation(const Operation& op, const char* call) {
  if (!op.comm) badArgument("comm is NULL");
  // Refused by the call itself, also where it would run in the background (non-blocking config).
  if (op.comm->finalized()) refuse("the communicator was finalized (ncclCommFinalize)");
  if (op.comm->pending()) badArgument(kStillBeingMade);
  const TypeInfo info = typeInfo(op.type, call);
  const int n = op.comm->size;
  if (rootedKind(op.kind) && (op.root < 0 || op.root >= n))
    badArgument("root " + std::to_string(op.root) + " is out of range (0.." + std::to_string(n - 1) + ")");
  if (pointToPoint(op.kind) && (op.peer < 0 || op.peer >= n))
    badArgument("peer " + std::to_string(op.peer) + " is out of range (0.." + std::to_string(n - 1) + ")");
  if (reduces(op.kind)) op.comm->redOps.resolve(op.op, op.type, call);  // throws for an unknown op
  size_t in = 0, out = 0;
  bufferCounts(op, &in, &out);
  // Its bytes would wrap around 64 bits and move the wrong amount of data.
  if (!fitsInMemory(in, info.size) || !fitsInMemory(out, info.size))
    badArgument("count " + std::to_string(op.count) + " of " + std::to_string(info.size) + "-byte elements" +
                (in == SIZE_MAX || out == SIZE_MAX ? " times " + std::to_string(n) + " ranks" : std::string()) +
                " is more memory than a process can address");
  if (in && !op.send) badArgument("sendbuff is NULL with " + std::to_string(in) + " elements to send");
  if (out && !op.recv) badArgument("recvbuff is NULL with " + std::to_string(out) + " elements to receive");
  // Both buffers on one side: forestcc runs a call on the host or on the GPU, not across.
  const int sendDevice = bufferDevice(op.send, in), recvDevice = bufferDevice(op.recv, out);
  if (sendDevice != kNoBuffer && recvDevice != kNoBuffer && sendDevice != recvDevice)
    refuse("sendbuff is " + describeMemory(sendDevice) + " but recvbuff is " + describeMemory(recvDevice) +
           ": pass both on the same GPU, or both in host memory");
  const int device = sendDevice != kNoBuffer ? sendDevice : recvDevice;
  if (device >= 0 && op.comm->device >= 0 && device != op.comm->device)
    refuse("the buffers are on CUDA device " + std::to_string(device) + ", but the communicator was made on device " +
           std::to_string(op.comm->device) + " (ncclCommCuDevice)");
  // GPU buffers are not refused here: the group they are in may forward (forwarding.cpp decides).
  return device < 0 ? -1 : device;
}

void runNativelyOrRefuse(const Operation& op) {
  Collectives::clearReached();
  bool onDevice = false;
  try {
    cuda::OnDevice on(op.device);
    onDevice = true;
    runNatively(op);
  } catch (...) {
    // The shim's own work before the collective (its device, lent memory, a staged copy, a
    // PreMulSum's scaling, an operator destroyed since the call) failed: the call is refused, as
    // the collective refuses what fails in its checks. (A send or receive refuses its own
    // failures once on its device: runPointToPoint.)
    if (!pointToPoint(op.kind)) {
      if (!Collectives::reached()) op.comm->collectives().refuseCall();
    } else if (!onDevice) {
      refusePointToPoint(*op.comm, {&op});
    }
    throw;
  }
}

void runNatively(const Operation& op) {
  ncclComm& comm = *op.comm;
  Collectives& coll = comm.collectives();
  const TypeInfo info = typeInfo(op.type, operationName(op.kind));
  const DataType t = info.type;
  const bool isRoot = comm.rank == op.root;
  size_t inCount = 0, outCount = 0;
  bufferCounts(op, &inCount, &outCount);
  const Placement at{op.device, op.stream};
  Collectives::WorkPtr work;

  if (reduces(op.kind)) {
    const ResolvedOp r = comm.redOps.resolve(op.op, op.type, operationName(op.kind));
    work = r.preMultiply ? runPreMulSum(comm, op, r, info, inCount, outCount, at)
                         : runReduce(comm, op.kind, op.send, op.recv, inCount, outCount, t, r.op, op.root, isRoot, at);
  } else {
    switch (op.kind) {
      case OpKind::Broadcast:
        // forestcc broadcasts in place: the root's data goes to recvbuff first (on the stream,
        // before the broadcast, on GPU memory).
        if (isRoot && op.send != op.recv && op.count) {
          if (at.device >= 0)
            cuda::copyOnStream(op.recv, op.send, op.count * info.size, at.stream, at.device);
          else
            std::memmove(op.recv, op.send, op.count * info.size);
        }
        work = coll.broadcast(at.tensor(op.recv, outCount, t), op.root, at.options());
        break;
      case OpKind::AllGather:
        work = coll.allGather(at.tensor(op.send, inCount, t), at.tensor(op.recv, outCount, t), at.options());
        break;
      case OpKind::AlltoAll:
        work = coll.allToAll(at.tensor(op.send, inCount, t), at.tensor(op.recv, outCount, t), at.options());
        break;
      case OpKind::Gather: {
        // NCCL's in-place gather (the root's sendbuff is its block of recvbuff): forestcc's
        // gather is out of place, so the root's block is staged and lands where it was.
        const void* send = op.send;
        const size_t bytes = op.count * info.size;
        if (isRoot && bytes && send == static_cast<const char*>(op.recv) + static_cast<size_t>(op.root) * bytes)
          send = stagedCopy(comm, send, bytes, at);
        work = coll.gather(at.tensor(send, inCount, t), isRoot ? at.tensor(op.recv, outCount, t) : Tensor::absent(),
                           op.root, at.options());
        break;
      }
      case OpKind::Scatter: {
        // NCCL's in-place scatter (the root's recvbuff is its block of sendbuff): the root's block
        // is already in place; forestcc's scatter, out of place, writes it into lent memory.
        void* recv = op.recv;
        const size_t bytes = op.count * info.size;
        if (isRoot && bytes && recv == static_cast<const char*>(op.send) + static_cast<size_t>(op.root) * bytes)
          recv = lent(comm, bytes, at);
        work = coll.scatter(isRoot ? at.tensor(op.send, inCount, t) : Tensor::absent(), at.tensor(recv, outCount, t),
                            op.root, at.options());
        break;
      }
      // A batch of one (groups.cpp runs a group's as one batch): a message to oneself needs its
      // pair in the same group, which the batch says.
      case OpKind::Send:
      case OpKind::Recv: runPointToPoint(comm, {&op}); return;
      default: throw NcclError(ncclInternalError, "runNatively: unhandled operation");
    }
  }
  if (at.device >= 0) comm.lastDeviceStream = static_cast<void*>(at.stream);
  if (work) comm.noteDeviceWork(std::move(work));
}

}  // namespace forestcc::nccl
