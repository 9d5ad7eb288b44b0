// Eager algorithms (MPI's eager protocol as a plan): for small messages, every rank puts what
// each peer needs straight into that peer's scratch bank and signals; no rank waits for its
// peers to enter first. That saves the entry handshake, one cross-core round trip, which is
// most of a small call's time. It is safe because the plan has scratch_banks 2 (scratch lives
// in the control blocks and alternates between two banks on successive eager calls) and every
// rank waits for every peer within each call, so no rank is ever more than one eager call ahead
// of another (schedules/README.md, "Scratch banks").
//
// Per rank, one step, N - 1 slots of one block in every receiver's bank (slotOf order):
//   all_reduce      puts its input to every peer, reduces its input and the N - 1 received
//                   vectors: sends (N-1) n.
//   reduce_scatter  puts block p of its input to rank p, reduces its own block with the N - 1
//                   received: sends (N-1)/N n.
//   all_gather      puts its input to every peer, copies the received blocks into the output:
//                   sends (N-1)/N n.
//   all_to_all      puts block p to rank p, copies the received blocks into the output: sends
//                   (N-1)/N n.
// A bank holds kScratchBankBytes, so a plan serves messages up to eagerMaxBytes().
#include "collectives/generators/common.hpp"
#include "core/control_block.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "eager";

void waitAll(PlanBuilder& b, const AllPairs& ch, int r, int w) {
  for (int p : ch.peers(r)) b.wait(r, w, ch.at(r, p));
}

void flushAll(PlanBuilder& b, const AllPairs& ch, int r, int w) {
  for (int p : ch.peers(r)) b.flush(r, w, ch.at(r, p));
}

// The slots of every peer's block in rank r's bank, in peers(r) order, with their senders.
std::vector<std::pair<int, Ref>> received(const AllPairs& ch, int r) {
  std::vector<std::pair<int, Ref>> slots;
  for (int p : ch.peers(r)) slots.push_back({p, scr(uint32_t(slotOf(p, r)))});
  return slots;
}

plan::Plan generateEager(const GenerateRequest& req) {
  using C = plan::Collective;
  const int n = req.nranks;
  if (n == 1) return singleRankPlan(kName, req);
  const bool reduces = req.collective == C::AllReduce || req.collective == C::ReduceScatter;
  // Whether peer p gets the whole input (all_reduce, all_gather) or input block p.
  const bool whole = req.collective == C::AllReduce || req.collective == C::AllGather;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    for (int p : ch.peers(r))
      b.putSignal(r, w, ch.at(r, p), in(whole ? 0 : uint32_t(p)), scr(uint32_t(slotOf(r, p))));
    // This rank's own share of the output, while the peers' data travels.
    const Ref own = whole ? in(0) : in(uint32_t(r));
    const Ref ownOut = req.collective == C::AllReduce || req.collective == C::ReduceScatter ? out(0) : out(uint32_t(r));
    if (!reduces && !req.inPlace) b.copy(r, w, own, ownOut);
    waitAll(b, ch, r, w);
    // In place the puts read the output: they must be done before it is overwritten.
    if (req.inPlace && req.collective != C::AllGather) flushAll(b, ch, r, w);
    if (reduces) {
      std::vector<Ref> srcs{req.inPlace ? ownOut : own};
      for (const auto& slot : received(ch, r)) srcs.push_back(slot.second);
      b.reduce(r, w, ownOut, srcs);
    } else {
      for (const auto& slot : received(ch, r)) b.copy(r, w, slot.second, out(uint32_t(slot.first)));
    }
  }
  const int64_t limit = eagerMaxBytes(req.collective, n);
  return finishPlan(b, kName, PlanBuilder::BuildOptions{0, limit, 1, 0, 2});
}

}  // namespace

int64_t eagerMaxBytes(plan::Collective c, int nranks) {
  if (nranks <= 1) return -1;
  const int64_t slot = static_cast<int64_t>(kScratchBankBytes) / (nranks - 1);  // one block per peer
  return c == plan::Collective::AllReduce ? slot : slot * nranks;
}

const Algorithm& eagerAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "one step, no entry handshake: data straight into the peers' scratch banks (smallest messages)",
      {C::AllReduce, C::ReduceScatter, C::AllGather, C::AllToAll}, generateEager, eagerMaxBytes};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
