// Communicators made from a parent by an agreement over it: ncclCommSplit, ncclCommShrink and the
// existing ranks of ncclCommGrow. The three differ only in the agreement (who lands where, and the
// id they join); how the agreement runs is one thing, kept here, as NCCL's does it for all three:
//   - inside ncclGroupStart/End it waits for ncclGroupEnd, where the agreements of the group run
//     at once (NCCL's single-thread multi-rank use: one thread makes several ranks' communicators,
//     each agreement waiting for the others' ranks, which may be this thread's);
//   - with a non-blocking parent and config it runs in the background and the call returns
//     ncclInProgress, parent and new communicator both in progress until it is done;
//   - otherwise it runs before the call returns.
// Either of the first two returns before the other ranks have called, as NCCL's does.
#pragma once

#include <functional>
#include <optional>

#include "forestcc/bootstrap.hpp"
#include "nccl/comm.hpp"
#include "nccl/comm_config.hpp"
#include "nccl/include/nccl.h"

namespace forestcc::nccl {

// Where this rank lands in the new communicator, and the id its ranks join.
struct Place {
  int rank = -1;
  int size = 0;
  forestcc::UniqueId id;
};

// Runs over the parent (holding an ncclComm::Use of it) and says where this rank lands; nullopt
// when it gets no communicator (NCCL_SPLIT_NOCOLOR). Throws what the call should fail with.
using Agreement = std::function<std::optional<Place>()>;

// `call` (a string literal) names the call in errors; `makesOne` says whether this rank gets a
// communicator (*newcomm stays NULL when not; newcomm may be NULL then). On the deferred and background paths *newcomm is
// made at once, with rank -1 and size 0 until the agreement placed it (ncclComm::pending).
ncclResult_t makeFromParent(ncclComm* parent, const char* call, const CommConfig& config, bool makesOne,
                            Agreement agree, ncclComm_t* newcomm);

}  // namespace forestcc::nccl
