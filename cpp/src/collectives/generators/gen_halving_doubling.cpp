// Recursive halving / doubling (Rabenseifner): log2(P) exchange steps with partners at
// distance P/2, P/4, ..., 1 (halving: each step halves the range a rank reduces) and back
// 1, 2, ..., P/2 (doubling: each step doubles the range a rank holds).
//
// Any rank count: P is the largest power of two <= N and E = N - P. Ranks 0, 2, ..., 2E-2 are
// "extra": each hands its data to its odd neighbour, waits, and gets the result back; the odd
// neighbours and the ranks >= 2E form P groups g (rank 2g+1 for g < E, rank g+E after), and a
// group stands for the blocks of its ranks, which are contiguous ([2g, 2g+2) or [g+E]).
//
// Per rank (n as in gen_ring.cpp), P a power of two:
//   all_reduce      2 log2 P steps, sends 2(P-1)/P n, reduces (P-1)/P n; scratch: step t's
//                   half in block t, (P-1)/P n touched in log2 P blocks
//   reduce_scatter  log2 P steps, sends (P-1)/P n; scratch N-1 blocks
//   all_gather      log2 P steps, sends (P-1)/P n; no scratch
//   barrier         log2 P signal rounds
// Otherwise one step before and after (the extra rank sends n and receives the result: n for
// all_reduce/all_gather, n/N for reduce_scatter); scratch grows by the folded input (n) where
// the output cannot hold it (in-place all_reduce, reduce_scatter).
#include "collectives/generators/common.hpp"

#include <tuple>

#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "halving_doubling";
const PlanBuilder::BuildOptions kPipelined{0, -1, 16, 64 << 10};

// The largest power of two <= n.
int powerOfTwoBelow(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The groups, their partners and channels, and the chunk span of each group.
struct Groups {
  Groups(PlanBuilder& b, bool blockPerRank)
      : n(b.nranks()), P(powerOfTwoBelow(b.nranks())), E(n - P), perRank(blockPerRank) {
    for (int m = P / 2; m >= 1; m /= 2) masks.push_back(m);  // halving order
    step.assign(masks.size(), std::vector<int>(n, -1));
    fold.assign(n, -1);
    for (int i = 0; i < E; ++i) std::tie(fold[2 * i], fold[2 * i + 1]) = b.channelPair(2 * i, 2 * i + 1);
    for (size_t t = 0; t < masks.size(); ++t)
      for (int g = 0; g < P; ++g)
        if (g < (g ^ masks[t])) std::tie(step[t][active(g)], step[t][active(g ^ masks[t])]) =
                                    b.channelPair(active(g), active(g ^ masks[t]));
  }
  bool extra(int r) const { return r < 2 * E && r % 2 == 0; }
  bool hasExtra(int r) const { return r < 2 * E && r % 2 == 1; }
  int group(int r) const { return r < 2 * E ? r / 2 : r - E; }
  int active(int g) const { return g < E ? 2 * g + 1 : g + E; }
  // First chunk and chunk count of the groups [a, b): one chunk per group (all_reduce) or the
  // blocks of the group's ranks (reduce_scatter, all_gather).
  uint32_t first(int a) const { return uint32_t(perRank ? (a < E ? 2 * a : a + E) : a); }
  uint32_t count(int a, int b) const { return first(b) - first(a); }
  // The range of groups a group keeps after halving step t: [lo, lo + masks[t]).
  int keepLo(int g, size_t t) const { return g & ~(masks[t] - 1); }
  int giveLo(int g, size_t t) const { return (g ^ masks[t]) & ~(masks[t] - 1); }
  // Channel of step t on rank r (the same pair serves the halving and the doubling step).
  int at(size_t t, int r) const { return step[t][r]; }
  // Doubling steps run the halving steps backwards.
  std::vector<size_t> doublingOrder() const {
    std::vector<size_t> order;
    for (size_t t = masks.size(); t-- > 0;) order.push_back(t);
    return order;
  }

  int n, P, E;
  bool perRank;
  std::vector<int> masks;
  std::vector<std::vector<int>> step;  // [t][rank] -> channel
  std::vector<int> fold;               // rank -> channel to its fold partner (-1: none)
};

// Entry signals of an active rank: to its extra (which puts into it) and every step partner.
void announce(PlanBuilder& b, const Groups& gr, int r, int w) {
  if (gr.hasExtra(r)) b.signal(r, w, gr.fold[r]);
  for (size_t t = 0; t < gr.masks.size(); ++t) b.signal(r, w, gr.at(t, r));
}

// An active rank with an extra one waits for it to enter and then for its data.
void waitEntryAndData(PlanBuilder& b, const Groups& gr, int r, int w) {
  b.wait(r, w, gr.fold[r]);
  b.wait(r, w, gr.fold[r]);
}

// Halving reduce-scatter then doubling all-gather over P chunks (chunk g = group g). The
// partial sums live in the output (overwritten by the all-gather after every read, ordered by
// the step signals); step t's incoming half lands in its own scratch region. An extra rank's
// input lands in its partner's output (scratch when in place) and is added in step 0.
plan::Plan allReduce(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req, uint32_t(powerOfTwoBelow(req.nranks)));
  Groups gr(b, false);
  const uint32_t P = uint32_t(gr.P);
  const bool foldInScratch = req.inPlace && gr.E > 0;
  auto foldAt = [&](uint32_t c) { return foldInScratch ? scr(c) : out(c); };
  // Step t's incoming half lands in scratch block region(t), at its own place in the block
  // (only chunks of the same place in a block have the same size).
  auto region = [&](size_t t, uint32_t chunk) { return scr(uint32_t((foldInScratch ? 1 : 0) + t) * P + chunk); };
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    if (gr.extra(r)) {
      const int c = gr.fold[r];
      b.signal(r, w, c);
      b.wait(r, w, c);
      b.putSignal(r, w, c, in(0), foldAt(0), P);
      b.wait(r, w, c);
      continue;
    }
    const int v = gr.group(r);
    const bool folded = gr.hasExtra(r);
    announce(b, gr, r, w);
    if (folded) waitEntryAndData(b, gr, r, w);
    for (size_t t = 0; t < gr.masks.size(); ++t) {
      const uint32_t m = uint32_t(gr.masks[t]);
      const int c = gr.at(t, r);
      const uint32_t keep = uint32_t(gr.keepLo(v, t)), give = uint32_t(gr.giveLo(v, t));
      b.wait(r, w, c);
      if (t == 0 && folded) {
        b.reducePut(r, w, c, out(give), {out(give), req.inPlace ? foldAt(give) : in(give)}, region(t, give), m);
      } else {
        b.put(r, w, c, t == 0 ? in(give) : out(give), region(t, give), m);
      }
      b.signal(r, w, c);
      b.wait(r, w, c);
      std::vector<Ref> srcs{out(keep), region(t, keep)};
      if (t == 0) {
        srcs[0] = req.inPlace ? out(keep) : in(keep);
        if (folded) srcs.push_back(req.inPlace ? foldAt(keep) : out(keep));
      }
      b.reduce(r, w, out(keep), srcs, m);
    }
    for (size_t t : gr.doublingOrder()) {
      const uint32_t m = uint32_t(gr.masks[t]);
      const uint32_t mine = uint32_t(gr.keepLo(v, t));
      b.putSignal(r, w, gr.at(t, r), out(mine), out(mine), m);
      b.wait(r, w, gr.at(t, r));
    }
    if (folded) b.putSignal(r, w, gr.fold[r], out(0), out(0), P);
  }
  b.setParam("extra_ranks", gr.E);
  return finishPlan(b, kName, kPipelined);
}

// Halving over blocks: in step t a rank sends the partial sums of the half it gives away into
// its partner's step-t scratch region and adds the partner's partial sums of the half it keeps
// in place there. After the last step a group holds its blocks reduced: its own goes to the
// output, the extra rank's block to the extra rank's output.
plan::Plan reduceScatter(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Groups gr(b, true);
  const uint32_t base = gr.E > 0 ? uint32_t(req.nranks) : 0;  // folded inputs: scratch [0, N)
  // region[g][t]: scratch offset where group g receives step t's half
  std::vector<std::vector<uint32_t>> region(gr.P);
  for (int g = 0; g < gr.P; ++g) {
    uint32_t offset = base;
    for (size_t t = 0; t < gr.masks.size(); ++t) {
      region[g].push_back(offset);
      offset += gr.count(gr.keepLo(g, t), gr.keepLo(g, t) + gr.masks[t]);
    }
  }
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    if (gr.extra(r)) {
      const int c = gr.fold[r];
      b.signal(r, w, c);
      b.wait(r, w, c);
      b.putSignal(r, w, c, in(0), scr(0), uint32_t(req.nranks));
      b.wait(r, w, c);
      continue;
    }
    const int v = gr.group(r);
    const bool folded = gr.hasExtra(r);
    announce(b, gr, r, w);
    if (folded) waitEntryAndData(b, gr, r, w);
    uint32_t prevRegion = 0, prevFirst = 0;  // where the partial sums of the kept range live
    for (size_t t = 0; t < gr.masks.size(); ++t) {
      const int m = gr.masks[t], keepLo = gr.keepLo(v, t), giveLo = gr.giveLo(v, t);
      const uint32_t k0 = gr.first(keepLo), kn = gr.count(keepLo, keepLo + m);
      const uint32_t g0 = gr.first(giveLo), gn = gr.count(giveLo, giveLo + m);
      const int c = gr.at(t, r), partner = gr.active(v ^ m);
      const Ref remote = scr(region[gr.group(partner)][t]);
      b.wait(r, w, c);
      if (t == 0 && folded) {
        b.reducePut(r, w, c, scr(g0), {scr(g0), in(g0)}, remote, gn);
      } else {
        b.put(r, w, c, t == 0 ? in(g0) : scr(prevRegion + g0 - prevFirst), remote, gn);
      }
      b.signal(r, w, c);
      b.wait(r, w, c);
      // sources of kept block k0 + i
      auto sources = [&](uint32_t i) {
        std::vector<Ref> srcs{scr(region[v][t] + i)};
        if (t == 0) {
          srcs.push_back(in(k0 + i));
          if (folded) srcs.push_back(scr(k0 + i));
        } else {
          srcs.push_back(scr(prevRegion + k0 + i - prevFirst));
        }
        return srcs;
      };
      if (t + 1 < gr.masks.size()) {
        b.reduce(r, w, scr(region[v][t]), sources(0), kn);  // sources(0)[0] is the region itself
      } else {
        for (uint32_t i = 0; i < kn; ++i) {
          if (int(k0 + i) == r) {
            b.reduce(r, w, out(0), sources(i));
          } else {  // the extra rank's block
            b.reducePut(r, w, gr.fold[r], scr(region[v][t] + i), sources(i), out(0));
            b.signal(r, w, gr.fold[r]);
          }
        }
      }
      prevRegion = region[v][t], prevFirst = k0;
    }
  }
  b.setParam("extra_ranks", gr.E);
  return finishPlan(b, kName, kPipelined);
}

// Doubling over blocks: in step t (masks 1, 2, ...) a rank puts the blocks its group has
// gathered so far into the partner's output; an extra rank's block is folded in first and the
// whole output handed back at the end.
plan::Plan allGather(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Groups gr(b, true);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    if (gr.extra(r)) {
      const int c = gr.fold[r];
      b.signal(r, w, c);
      b.wait(r, w, c);
      b.putSignal(r, w, c, in(0), out(uint32_t(r)));
      if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
      b.wait(r, w, c);
      continue;
    }
    const int v = gr.group(r);
    const bool folded = gr.hasExtra(r);
    announce(b, gr, r, w);
    if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
    if (folded) waitEntryAndData(b, gr, r, w);
    for (size_t t : gr.doublingOrder()) {
      const int m = gr.masks[t], lo = gr.keepLo(v, t);
      const int c = gr.at(t, r);
      b.wait(r, w, c);
      b.putSignal(r, w, c, out(gr.first(lo)), out(gr.first(lo)), gr.count(lo, lo + m));
      b.wait(r, w, c);
    }
    if (folded) {
      const int x = r - 1;
      if (x > 0) b.put(r, w, gr.fold[r], out(0), out(0), uint32_t(x));
      b.putSignal(r, w, gr.fold[r], out(uint32_t(x + 1)), out(uint32_t(x + 1)), uint32_t(req.nranks - x - 1));
    }
  }
  b.setParam("extra_ranks", gr.E);
  return finishPlan(b, kName, kPipelined);
}

// Recursive doubling barrier; an extra rank checks in with its partner before and is released
// after.
plan::Plan barrier(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Groups gr(b, true);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    if (gr.extra(r)) {
      b.signal(r, w, gr.fold[r]);
      b.wait(r, w, gr.fold[r]);
      continue;
    }
    if (gr.hasExtra(r)) b.wait(r, w, gr.fold[r]);
    for (size_t t = 0; t < gr.masks.size(); ++t) {
      b.signal(r, w, gr.at(t, r));
      b.wait(r, w, gr.at(t, r));
    }
    if (gr.hasExtra(r)) b.signal(r, w, gr.fold[r]);
  }
  b.setParam("extra_ranks", gr.E);
  return finishPlan(b, kName);
}

plan::Plan generateHalvingDoubling(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllReduce: return allReduce(req);
    case C::ReduceScatter: return reduceScatter(req);
    case C::AllGather: return allGather(req);
    case C::Barrier: return barrier(req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "halving_doubling: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& halvingDoublingAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "Rabenseifner: log2 P exchange steps each way; extra ranks of non-powers of two fold in",
      {C::AllReduce, C::ReduceScatter, C::AllGather, C::Barrier}, generateHalvingDoubling};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
