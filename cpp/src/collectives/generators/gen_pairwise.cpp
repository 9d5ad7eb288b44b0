// Pairwise exchange: N-1 steps; in step s rank r puts its block for r+s into that rank's
// output and waits for the block from r-s, so at any time every rank sends to one peer and
// receives from one (no incast). Sends (N-1)/N n; in place the input is first copied to
// scratch (N-1 blocks). sendrecv is the ring shift.
#include "collectives/generators/common.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "pairwise";

plan::Plan allToAll(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (req.inPlace) stageAllToAllInput(b, r, w);
    for (int p : ch.peers(r)) b.signal(r, w, ch.at(r, p));
    if (!req.inPlace) b.copy(r, w, in(uint32_t(r)), out(uint32_t(r)));
    // A peer's first signal says it entered; it is consumed the first time this rank waits on
    // the peer's channel, which is the data wait when the peer sends before it receives.
    std::vector<bool> entered(n, false);
    auto waitEntry = [&](int p) {
      if (entered[p]) return;
      b.wait(r, w, ch.at(r, p));
      entered[p] = true;
    };
    for (int s = 1; s < n; ++s) {
      const int to = (r + s) % n, from = mod(r - s, n);
      waitEntry(to);
      b.putSignal(r, w, ch.at(r, to), req.inPlace ? scr(uint32_t(slotOf(to, r))) : in(uint32_t(to)), out(uint32_t(r)));
      waitEntry(from);
      b.wait(r, w, ch.at(r, from));
    }
  }
  return finishPlan(b, kName);
}

plan::Plan generatePairwise(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllToAll: return allToAll(req);
    case C::SendRecv: return shiftSendRecv(kName, req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "pairwise: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& pairwiseAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{kName, "N-1 exchange steps, one peer each way per step",
                                   {C::AllToAll, C::SendRecv}, generatePairwise};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
