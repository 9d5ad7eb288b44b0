// ncclSend/ncclRecv: a group's sends and receives on one communicator become one forestcc
// point-to-point batch (Collectives::sendRecv: one rendezvous per peer, however many messages; no
// pattern can deadlock; a mismatch fails both ranks of it). docs/nccl-shim.md, "Groups".
//
// On GPU memory the messages carry their device and the batch the caller's stream; the call is
// synchronous on the host (the rendezvous with each peer) and returns once the copies are enqueued
// on the stream, so work the program enqueues next on that stream sees the received data. (An
// async batch would enqueue its copies later, from the engine's thread: too late for NCCL's
// stream semantics.)
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/on_error.hpp"
#include "forestcc/collective_api.hpp"
#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/operation.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

// The device of a batch's messages (-1: host memory). Only non-empty messages say where they live
// (an empty buffer may be any pointer): the first one decides, and every other must agree.
int batchDevice(const std::vector<const Operation*>& ops) {
  const Operation* first = nullptr;
  for (const Operation* op : ops) {
    if (!op->count) continue;
    if (!first) {
      first = op;
    } else if ((op->device >= 0) != (first->device >= 0)) {
      refuse(std::string("nccl") + operationName(op->kind) + " with rank " + std::to_string(op->peer) + " is " +
             (op->device >= 0 ? "GPU" : "host") + " memory but nccl" + operationName(first->kind) + " with rank " +
             std::to_string(first->peer) + " in the same group is " + (first->device >= 0 ? "GPU" : "host") +
             " memory: a group's sends and receives are one batch, all on the GPU or all on the host");
    }
  }
  return first ? first->device : -1;
}

}  // namespace

void checkBatches(const std::vector<Operation>& ops) {
  std::map<ncclComm*, std::vector<const Operation*>> batches;
  for (const Operation& op : ops)
    if (pointToPoint(op.kind)) batches[op.comm].push_back(&op);
  for (const auto& b : batches) batchDevice(b.second);
}

void refusePointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops) noexcept {
  try {
    std::vector<SendMessage> sends;
    std::vector<RecvMessage> recvs;
    for (const Operation* op : ops) {
      if (op->kind == OpKind::Send) sends.push_back(SendMessage{op->peer});
      if (op->kind == OpKind::Recv) recvs.push_back(RecvMessage{op->peer});
    }
    comm.collectives().refuseSendRecv(std::move(sends), std::move(recvs));
  } catch (...) {
    // No memory for the lists: the peers find this rank at their timeout, as they would without.
  }
}

void runPointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops) {
  std::vector<SendMessage> sends;
  std::vector<RecvMessage> recvs;
  int device = -1;
  cudaStream_t stream = nullptr;
  {
    OnError refusal([&] { refusePointToPoint(comm, ops); });
    device = batchDevice(ops);
    for (const Operation* op : ops)
      if (op->count) {
        stream = op->stream;
        break;
      }
    for (const Operation* op : ops) {
      const size_t bytes = op->count * typeInfo(op->type, operationName(op->kind)).size;
      if (op->kind == OpKind::Send) {
        sends.push_back(SendMessage{op->peer, op->send, bytes, device});
      } else {
        recvs.push_back(RecvMessage{op->peer, op->recv, bytes, device});
      }
    }
    refusal.dismiss();  // sendRecv refuses what it refuses itself
  }
  comm.collectives().sendRecv(std::move(sends), std::move(recvs), false, device < 0 ? nullptr : stream);
}

}  // namespace forestcc::nccl
