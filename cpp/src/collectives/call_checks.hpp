// The checks of one collective call before any rank communicates, driven by the collective's
// row of the table in forestcc/plan.hpp: which buffers this rank passes, their types and sizes,
// the root, the split sizes of all_to_all_v, and whether the call is in place. Errors name the
// argument (InvalidUsage, or InvalidType for a type that does not match).
#pragma once

#include "collectives/engine.hpp"
#include "forestcc/collective_api.hpp"

namespace forestcc::collectives {

// What a checked call runs with.
struct CheckedCall {
  CallBuffers buffers;
  bool inPlace = false;
  int root = -1;  // -1 for collectives without a root
  Engine::StandIn standIn = Engine::StandIn::None;
};

void checkCall(const CallRequest& request, int rank, int nranks, CheckedCall& out);

// A rank argument (root, peer): "root: 5 is out of range: must be a rank in [0, 4)".
int checkRank(int64_t value, const char* arg, int nranks);
// A batch of sends and receives: no receive buffer overlaps another or a send buffer (the batch's
// messages move at once, in no set order, so its data would depend on timing); sends may share
// memory. InvalidUsage naming both messages otherwise.
void checkBatchBuffers(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs, int rank);

}  // namespace forestcc::collectives
