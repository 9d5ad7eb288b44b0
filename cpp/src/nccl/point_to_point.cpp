// ncclSend/ncclRecv: a group's sends and receives on one communicator become one forestcc
// point-to-point batch (Collectives::sendRecv: one rendezvous per peer, however many messages; no
// pattern can deadlock; a mismatch fails both ranks of it). docs/nccl-shim.md, "Groups".
//
// On GPU memory the messages carry their device and the batch the caller's stream, once
// Collectives::sendRecv takes them (a `device` on SendMessage/RecvMessage and a stream argument
// after `async`): the shim detects that signature at compile time, so it builds against a core that
// moves host memory only and refuses GPU messages there with a message, never handing the host
// protocol a GPU pointer.
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "forestcc/collective_api.hpp"
#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/operation.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

template <class M, class = void>
struct CarriesDevice : std::false_type {};
template <class M>
struct CarriesDevice<M, std::void_t<decltype(std::declval<M&>().device = 0)>> : std::true_type {};

template <class C, class = void>
struct TakesStream : std::false_type {};
template <class C>
struct TakesStream<C, std::void_t<decltype(std::declval<C&>().sendRecv(std::declval<std::vector<SendMessage>>(),
                                                                      std::declval<std::vector<RecvMessage>>(), true,
                                                                      static_cast<void*>(nullptr)))>>
    : std::true_type {};

constexpr bool kDeviceBatches =
    CarriesDevice<SendMessage>::value && CarriesDevice<RecvMessage>::value && TakesStream<Collectives>::value;

template <class M>
void setDevice(M& message, int device) {
  if constexpr (CarriesDevice<M>::value) message.device = device;
}

// The batch on GPU memory: enqueued on `stream` (every message of a group on one communicator
// shares the first call's stream, as NCCL runs a group on its streams together).
template <class C>
Collectives::WorkPtr runOnDevice(C& coll, std::vector<SendMessage> sends, std::vector<RecvMessage> recvs,
                                 cudaStream_t stream) {
  if constexpr (TakesStream<C>::value) {
    // async: its Work, which ncclCommGetAsyncError polls
    return coll.sendRecv(std::move(sends), std::move(recvs), true, static_cast<void*>(stream));
  } else {
    (void)coll, (void)sends, (void)recvs, (void)stream;
    return nullptr;
  }
}

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

void runPointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops) {
  const int device = batchDevice(ops);
  cudaStream_t stream = nullptr;
  for (const Operation* op : ops)
    if (op->count) {
      stream = op->stream;
      break;
    }
  std::vector<SendMessage> sends;
  std::vector<RecvMessage> recvs;
  for (const Operation* op : ops) {
    const size_t bytes = op->count * typeInfo(op->type, operationName(op->kind)).size;
    if (op->kind == OpKind::Send) {
      sends.push_back(SendMessage{op->peer, op->send, bytes});
      setDevice(sends.back(), device);
    } else {
      recvs.push_back(RecvMessage{op->peer, op->recv, bytes});
      setDevice(recvs.back(), device);
    }
  }
  if (device < 0) {
    comm.collectives().sendRecv(std::move(sends), std::move(recvs));
    return;
  }
  if (!kDeviceBatches)
    refuse("send/recv of GPU memory: this forestcc build's point-to-point batch (Collectives::sendRecv) moves host "
           "memory only");
  if (auto work = runOnDevice(comm.collectives(), std::move(sends), std::move(recvs), stream))
    comm.noteDeviceWork(std::move(work));
}

}  // namespace forestcc::nccl
