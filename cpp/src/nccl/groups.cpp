// ncclGroupStart/End and how operations run. Calls made inside a group are kept (after their
// arguments are checked) and run at the outermost ncclGroupEnd, all natively or all through the
// fallback NCCL: a group is never split between the two libraries. Natively, each communicator's
// collectives run in call order, then its sends and receives in an order that cannot deadlock (see
// runPointToPoint); communicators of one group run on threads of their own, so operations on
// several communicators of this process (ncclCommInitAll) progress together.
#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/operation.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<Operation> operations;
  std::string failure;  // the first call of the group that was refused: the group runs nothing
};
thread_local GroupState group;

// Send/recv pairs run as rendezvous (a send returns when the peer has copied it). The pairs of
// ranks are taken in one order every rank agrees on, (lower rank, higher rank); inside a pair the
// lower rank sends first, then receives, and the higher rank the other way round. The earliest
// pair with work left always has both its ranks at it, so every group completes, whatever its
// pattern (a ring, an all-to-all with unequal sizes, several messages to one peer in FIFO order).
void runPointToPoint(ncclComm& comm, const std::vector<const Operation*>& ops) {
  std::vector<const Operation*> selfSends, selfRecvs;
  struct Step {
    int low, high, phase;
    const Operation* op;
  };
  std::vector<Step> steps;
  for (const Operation* op : ops) {
    if (op->peer == comm.rank) {
      (op->kind == OpKind::Send ? selfSends : selfRecvs).push_back(op);
      continue;
    }
    const bool sendsFirst = comm.rank < op->peer;
    const int phase = (op->kind == OpKind::Send) == sendsFirst ? 0 : 1;
    steps.push_back({std::min(comm.rank, op->peer), std::max(comm.rank, op->peer), phase, op});
  }
  // Messages to oneself: the k-th send goes to the k-th recv.
  if (selfSends.size() != selfRecvs.size())
    refuse("the group has " + std::to_string(selfSends.size()) + " sends to this rank itself and " +
           std::to_string(selfRecvs.size()) + " recvs from it; they must pair up");
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const size_t sent = selfSends[k]->count * typeInfo(selfSends[k]->type, "ncclSend").size;
    const size_t wanted = selfRecvs[k]->count * typeInfo(selfRecvs[k]->type, "ncclRecv").size;
    if (sent != wanted)
      refuse("send " + std::to_string(k) + " to this rank itself has " + std::to_string(sent) +
             " bytes but its recv expects " + std::to_string(wanted));
  }
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const size_t bytes = selfSends[k]->count * typeInfo(selfSends[k]->type, "ncclSend").size;
    if (bytes) std::memmove(selfRecvs[k]->recv, selfSends[k]->send, bytes);
  }
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    if (a.low != b.low) return a.low < b.low;
    if (a.high != b.high) return a.high < b.high;
    return a.phase < b.phase;
  });
  for (const Step& s : steps) runNatively(*s.op);
}

// One communicator's share of a group, on this thread.
void runOnComm(ncclComm& comm, const std::vector<const Operation*>& ops) {
  std::vector<const Operation*> p2p;
  for (const Operation* op : ops) {
    if (pointToPoint(op->kind))
      p2p.push_back(op);
    else
      runNatively(*op);
  }
  if (p2p.size() == 1)
    runNatively(*p2p[0]);
  else if (!p2p.empty())
    runPointToPoint(comm, p2p);
}

void runEachComm(const std::vector<ncclComm*>& comms, std::map<ncclComm*, std::vector<const Operation*>>& byComm);

void runGroup(const std::vector<Operation>& ops) {
  if (ops.empty()) return;
  std::string why;
  for (const Operation& op : ops) {
    if (mustForward(op, &why)) return forwardGroup(ops, op, why);
  }
  // Every communicator of the group learns of a failure (ncclCommGetAsyncError), while the Uses
  // still keep them alive.
  auto noteFailure = [](const std::vector<ncclComm*>& comms, const Error& e) {
    const bool argument = e.code() == ErrorCode::InvalidUsage || e.code() == ErrorCode::InvalidType;
    for (ncclComm* c : comms) c->noteError(resultOf(e.code()), std::string("ncclGroupEnd: ") + e.what(), !argument);
  };
  if (ops.size() == 1) {  // a call outside a group: the common case, without the bookkeeping below
    ncclComm::Use use(ops[0].comm, "ncclGroupEnd");
    try {
      return runNatively(ops[0]);
    } catch (const Error& e) {
      noteFailure({ops[0].comm}, e);
      throw;
    }
  }
  // Split by communicator, keeping each one's call order.
  std::vector<ncclComm*> comms;
  std::map<ncclComm*, std::vector<const Operation*>> byComm;
  for (const Operation& op : ops) {
    auto& list = byComm[op.comm];
    if (list.empty()) comms.push_back(op.comm);
    list.push_back(&op);
  }
  std::vector<std::unique_ptr<ncclComm::Use>> uses;
  for (ncclComm* c : comms) uses.push_back(std::make_unique<ncclComm::Use>(c, "ncclGroupEnd"));
  try {
    runEachComm(comms, byComm);
  } catch (const Error& e) {
    noteFailure(comms, e);
    throw;
  }
}

void runEachComm(const std::vector<ncclComm*>& comms,
                 std::map<ncclComm*, std::vector<const Operation*>>& byComm) {
  if (comms.size() == 1) return runOnComm(*comms[0], byComm[comms[0]]);

  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        runOnComm(*comms[i], byComm[comms[i]]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

ncclResult_t submit(const Operation& op, const char* call) {
  try {
    checkOperation(op, call);
  } catch (const std::exception& e) {
    if (group.depth > 0 && group.failure.empty()) group.failure = std::string(call) + ": " + e.what();
    throw;
  }
  if (group.depth > 0) {
    group.operations.push_back(op);
    return ncclSuccess;
  }
  runGroup({op});
  return ncclSuccess;
}

}  // namespace forestcc::nccl

using forestcc::nccl::group;

extern "C" ncclResult_t ncclGroupStart(void) {
  ++group.depth;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void) {
  return forestcc::nccl::guarded(nullptr, "ncclGroupEnd", [&] {
    if (group.depth == 0) forestcc::nccl::refuse("called without a matching ncclGroupStart");
    if (--group.depth > 0) return ncclSuccess;
    std::vector<forestcc::nccl::Operation> ops;
    ops.swap(group.operations);
    std::string failure;
    failure.swap(group.failure);
    if (!failure.empty())
      forestcc::nccl::refuse("the group ran none of its " + std::to_string(ops.size()) +
                             " operations because a call in it was refused (" + failure + ")");
    forestcc::nccl::runGroup(ops);
    return ncclSuccess;
  });
}

// NCCL estimates a group's time without running it; forestcc has no time model for NCCL groups
// yet. The group is ended (its operations discarded, as a simulation leaves them) and refused.
extern "C" ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return forestcc::nccl::guarded(nullptr, "ncclGroupSimulateEnd", [&]() -> ncclResult_t {
    if (group.depth == 0) forestcc::nccl::refuse("called without a matching ncclGroupStart");
    if (--group.depth == 0) {
      group.operations.clear();
      group.failure.clear();
    }
    if (simInfo) simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
    forestcc::nccl::refuse("forestcc cannot estimate the time of an NCCL group; the group was ended without "
                           "running (use forestcc plan simulate for forestcc's plans)");
  });
}
