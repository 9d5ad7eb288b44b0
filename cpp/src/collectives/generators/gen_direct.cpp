// Direct (all-pairs) algorithms, the shared-memory workhorse: every rank reaches every other
// in one hop, so a collective takes one or two steps, and the copying is spread over all ranks
// (a rank pulls with get what it alone needs, pushes with put what only it has). Each rank
// first signals every peer it talks to ("entered"), and touches a peer's memory only after the
// peer's signal.
//
// Per rank (n as in gen_ring.cpp; "copies" = bytes this rank's worker moves):
//   all_reduce      2 steps: rank r reduces part r of the vector reading every peer's part r
//                   in place (get_reduce), then puts it into every peer's output; reads
//                   (N-1)/N n from peers, sends (N-1)/N n, no scratch. On mapped memory this
//                   is one pass over the data where put-to-scratch + reduce took two.
//   all_gather      1 step, puts its block into every peer: sends (N-1)/N n.
//   reduce_scatter  1 step, rank r reduces block r reading the peers' blocks r in place
//                   (get_reduce): reads (N-1)/N n from peers, no scratch.
//   all_to_all      1 step, block p into rank p's output: sends (N-1)/N n (in place: a local
//                   copy of the input to scratch first, N-1 blocks).
//   broadcast       1 step, every non-root gets the root's input: n per non-root.
//   reduce          2 steps: rank r reduces part r as in all_reduce, then puts it into the
//                   root: reads (N-1)/N n from peers, the root receives (N-1)/N n.
//   gather          1 step, puts into the root: n/N per rank. scatter: 1 step, gets: n/N.
//   sendrecv        1 step (the ring shift). barrier: 1 round of N-1 signals.
// direct_small and eager (one step through the receivers' scratch) are in gen_staged.cpp.
#include "collectives/generators/common.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "direct";
// One slice, no size bound, for every direct plan. Plans that only move data make each transfer
// one copy, or one cross-process call, and one handshake. Plans that reduce keep each reduced piece
// in cache until it is put to the peers without slices too: the CPU interpreter runs a get_reduce
// chain and the puts of its result tile by tile (Interpreter::reduceThenPut), where each slice
// would cost a handshake with every peer (a wait for a peer that is not running, on a loaded or
// oversubscribed machine: 2 ranks under load, 25 MiB in place, 32 slices took 1.7x as long as one).
const PlanBuilder::BuildOptions kUnsliced{0, -1, 1, 0};

// Part r of the reduction, pulled: dst = first (op) every peer's input part r, read in place
// (get_reduce). Call once every peer has said it entered.
void pullParts(PlanBuilder& b, const AllPairs& ch, int r, int w, Ref dst, Ref first, Ref remote) {
  bool started = false;
  for (int p : ch.peers(r)) {
    b.getReduce(r, w, ch.at(r, p), dst, {started ? dst : first}, remote);
    started = true;
  }
}

plan::Plan allReduce(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req, uint32_t(n));
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    const Ref part = out(uint32_t(r));
    signalAll(b, ch, r, w);
    waitAll(b, ch, r, w);
    pullParts(b, ch, r, w, part, req.inPlace ? part : in(uint32_t(r)), in(uint32_t(r)));
    for (int p : ch.peers(r)) b.putSignal(r, w, ch.at(r, p), part, part);
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan reduce(const GenerateRequest& req) {
  const int n = req.nranks, root = req.root;
  PlanBuilder b = startPlan(kName, req, uint32_t(n));
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    const Ref part = out(uint32_t(r));  // the root's part r; scratch-like on other ranks
    signalAll(b, ch, r, w);
    waitAll(b, ch, r, w);
    pullParts(b, ch, r, w, part, req.inPlace ? part : in(uint32_t(r)), in(uint32_t(r)));
    // To the root: the part; to the others: done reading their inputs.
    for (int p : ch.peers(r)) {
      if (p == root) b.putSignal(r, w, ch.at(r, p), part, part);
      else b.signal(r, w, ch.at(r, p));
    }
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan allGather(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    signalAll(b, ch, r, w);
    for (int p : ch.peers(r)) {
      b.wait(r, w, ch.at(r, p));
      b.putSignal(r, w, ch.at(r, p), in(0), out(uint32_t(r)));
    }
    if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan reduceScatter(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    signalAll(b, ch, r, w);
    waitAll(b, ch, r, w);
    pullParts(b, ch, r, w, out(0), in(uint32_t(r)), in(uint32_t(r)));
    signalAll(b, ch, r, w);  // done reading the peers' inputs
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan allToAll(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (req.inPlace) stageAllToAllInput(b, r, w);
    signalAll(b, ch, r, w);
    for (int p : ch.peers(r)) {
      b.wait(r, w, ch.at(r, p));
      b.putSignal(r, w, ch.at(r, p), req.inPlace ? scr(uint32_t(slotOf(p, r))) : in(uint32_t(p)), out(uint32_t(r)));
    }
    if (!req.inPlace) b.copy(r, w, in(uint32_t(r)), out(uint32_t(r)));
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName, kUnsliced);
}

// broadcast and scatter: the root says it entered; every other rank gets its data from the
// root's input and says when it is done reading (the root returns only then).
plan::Plan pullFromRoot(const GenerateRequest& req) {
  const int n = req.nranks, root = req.root;
  const bool scatter = req.collective == plan::Collective::Scatter;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b, root);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (r == root) {
      signalAll(b, ch, r, w);
      if (!req.inPlace) b.copy(r, w, in(scatter ? uint32_t(root) : 0), out(0));
      waitAll(b, ch, r, w);
    } else {
      b.wait(r, w, ch.at(r, root));
      b.get(r, w, ch.at(r, root), in(scatter ? uint32_t(r) : 0), out(0));
      b.signal(r, w, ch.at(r, root));
    }
  }
  return finishPlan(b, kName, kUnsliced);
}

// gather: the root says it entered; every other rank puts its input into the root's output.
plan::Plan gather(const GenerateRequest& req) {
  const int n = req.nranks, root = req.root;
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b, root);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    if (r == root) {
      signalAll(b, ch, r, w);
      if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(root)));
      waitAll(b, ch, r, w);
    } else {
      b.wait(r, w, ch.at(r, root));
      b.putSignal(r, w, ch.at(r, root), in(0), out(uint32_t(r)));
    }
  }
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan barrier(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  AllPairs ch(b);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    signalAll(b, ch, r, w);
    waitAll(b, ch, r, w);
  }
  return finishPlan(b, kName);
}

plan::Plan generateDirect(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllReduce: return allReduce(req);
    case C::AllGather: return allGather(req);
    case C::ReduceScatter: return reduceScatter(req);
    case C::AllToAll: return allToAll(req);
    case C::Broadcast: case C::Scatter: return pullFromRoot(req);
    case C::Reduce: return reduce(req);
    case C::Gather: return gather(req);
    case C::SendRecv: return shiftSendRecv(kName, req);
    case C::Barrier: return barrier(req);
  }
  throw Error(ErrorCode::Internal, "direct: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& directAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "all pairs in one hop; 1-2 steps, copying spread over all ranks (shared memory)",
      {C::AllReduce, C::AllGather, C::ReduceScatter, C::AllToAll, C::Broadcast, C::Reduce, C::Gather,
       C::Scatter, C::SendRecv, C::Barrier},
      generateDirect};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
