// Staged algorithms: every rank puts what each peer needs into that peer's scratch (shared
// memory the peer owns and every rank maps) and the receivers finish locally, with copies or a
// reduce. On ordinary process memory this replaces cross-process copies (a system call each,
// pinning the pages it copies) by two ordinary ones, which wins while the data fits in cache,
// and it needs one step.
//
//   direct_small  entry handshake first (a rank signals "entered", peers wait for it before
//                 they put), scratch per call: any size.
//   eager         no handshake (MPI's eager protocol as a plan): the scratch is one of two
//                 banks in the control blocks that alternate across eager calls
//                 (scratch_banks 2), which saves one cross-core round trip per call. Safe
//                 because every rank waits for every peer within each call, so no rank is ever
//                 more than one eager call ahead of another (schedules/README.md, "Scratch
//                 banks"). A bank holds kScratchBankBytes: messages up to eagerMaxBytes().
//
// Per rank, one step, N - 1 slots of one block in every receiver's scratch (slotOf order):
//   all_reduce      its input to every peer, reduces its input and the N - 1 received
//                   vectors: sends (N-1) n.
//   reduce_scatter  block p of its input to rank p, reduces its own block with the N - 1
//                   received: sends (N-1)/N n.
//   all_gather      its input to every peer, copies the received blocks into the output:
//                   sends (N-1)/N n.
//   all_to_all      block p to rank p, copies the received blocks into the output: sends
//                   (N-1)/N n.
//   reduce          (direct_small only) every non-root puts its input into the root's
//                   scratch; the root reduces: n per non-root.
#include "collectives/generators/common.hpp"
#include "forestcc/error.hpp"
#include "transport/control_block.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kSmallName = "direct_small";
constexpr const char* kEagerName = "eager";
// Plans are not sliced (the default build options): each transfer is one copy, and nothing reads
// the data again for a slice to keep in cache.

// Eager plans keep their scratch in a fixed bank: the largest message they serve.
int64_t eagerMaxBytes(plan::Collective c, int nranks) {
  if (nranks <= 1) return -1;
  const int64_t slot = static_cast<int64_t>(kScratchBankBytes) / (nranks - 1);  // one block per peer
  return c == plan::Collective::AllReduce ? slot : slot * nranks;
}

// all_reduce, reduce_scatter, all_gather, all_to_all through the receivers' scratch; with
// `eager`, without the entry handshake, in scratch banks.
plan::Plan staged(const GenerateRequest& req, const char* name, bool eager) {
  using C = plan::Collective;
  const int n = req.nranks;
  if (n == 1) return singleRankPlan(name, req);
  const bool reduces = req.collective == C::AllReduce || req.collective == C::ReduceScatter;
  // Whether peer p gets the whole input (all_reduce, all_gather) or input block p.
  const bool whole = req.collective == C::AllReduce || req.collective == C::AllGather;
  PlanBuilder b = startPlan(name, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (!eager) signalAll(b, ch, r, w);  // entered: peers may write this rank's scratch
    for (int p : ch.peers(r)) {
      if (!eager) b.wait(r, w, ch.at(r, p));
      b.putSignal(r, w, ch.at(r, p), in(whole ? 0 : uint32_t(p)), scr(uint32_t(slotOf(r, p))));
    }
    // This rank's own share of the output, while the peers' data travels.
    const Ref own = whole ? in(0) : in(uint32_t(r));
    const Ref ownOut = reduces ? out(0) : out(uint32_t(r));
    if (!reduces && !req.inPlace) b.copy(r, w, own, ownOut);
    waitAll(b, ch, r, w);
    // In place the puts read the output: they must be done before it is overwritten.
    if (req.inPlace && req.collective != C::AllGather) flushAll(b, ch, r, w);
    if (reduces) {
      // In rank order, so that every rank folds the same values the same way: all_reduce
      // results are bitwise identical on all ranks (in place on more than kMaxReduceSources
      // ranks the builder's chain reads this rank's input first, and rounding may differ).
      std::vector<Ref> srcs;
      for (int p = 0; p < n; ++p) srcs.push_back(p == r ? (req.inPlace ? ownOut : own) : scr(uint32_t(slotOf(p, r))));
      b.reduce(r, w, ownOut, srcs);
    } else {
      for (int p : ch.peers(r)) b.copy(r, w, scr(uint32_t(slotOf(p, r))), out(uint32_t(p)));
    }
  }
  if (!eager) return finishPlan(b, name);
  return finishPlan(b, name, PlanBuilder::BuildOptions{0, eagerMaxBytes(req.collective, n), 1, 0, 2});
}

// direct_small reduce: every non-root puts its whole input into the root's scratch slot for
// it; the root reduces.
plan::Plan directSmallReduce(const GenerateRequest& req) {
  const int n = req.nranks, root = req.root;
  if (n == 1) return singleRankPlan(kSmallName, req);
  PlanBuilder b = startPlan(kSmallName, req);
  AllPairs ch(b, root);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (r != root) {
      b.wait(r, w, ch.at(r, root));
      b.putSignal(r, w, ch.at(r, root), in(0), scr(uint32_t(slotOf(r, root))));
      continue;
    }
    signalAll(b, ch, r, w);
    waitAll(b, ch, r, w);
    std::vector<Ref> srcs{req.inPlace ? out(0) : in(0)};
    for (int p : ch.peers(r)) srcs.push_back(scr(uint32_t(slotOf(p, r))));
    b.reduce(r, w, out(0), srcs);  // one rank reduces: any order gives one result
  }
  return finishPlan(b, kSmallName);
}

plan::Plan generateDirectSmall(const GenerateRequest& req) {
  if (req.collective == plan::Collective::Reduce) return directSmallReduce(req);
  return staged(req, kSmallName, false);
}

plan::Plan generateEager(const GenerateRequest& req) { return staged(req, kEagerName, true); }

}  // namespace

const Algorithm& directSmallAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kSmallName, "one step through the receivers' scratch: puts, then local reduce or copies (small messages, "
                  "private memory)",
      {C::AllReduce, C::ReduceScatter, C::AllGather, C::AllToAll, C::Reduce}, generateDirectSmall};
  return algorithm;
}

const Algorithm& eagerAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kEagerName, "direct_small without the entry handshake: data straight into the peers' scratch banks "
                  "(smallest messages)",
      {C::AllReduce, C::ReduceScatter, C::AllGather, C::AllToAll}, generateEager, eagerMaxBytes};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
