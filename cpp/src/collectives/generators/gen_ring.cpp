// Ring algorithms: every rank talks only to its neighbours r-1 and r+1, so each link carries
// the same load and every step runs on all ranks at once; bandwidth-optimal, N-1 steps per
// phase. Broadcast and reduce run along a chain (the ring without one link), pipelined in
// kChainChunks chunks so that every link is busy once the pipeline has filled.
//
// Per rank, n = bytes of the vector (all_reduce), of the output (all_gather), of the input
// (reduce_scatter), of the message (broadcast, reduce, sendrecv):
//   all_reduce      2(N-1) steps, sends 2(N-1)/N n, reduces (N-1)/N n
//   all_gather      N-1 steps,    sends (N-1)/N n
//   reduce_scatter  N-1 steps,    sends (N-1)/N n, reduces (N-1)/N n
//   broadcast       N-1 + kChainChunks-1 chunk steps, sends n (the last rank sends nothing)
//   reduce          N-1 + kChainChunks-1 chunk steps, sends n, reduces n (the first sends only)
//   sendrecv        1 step, sends n; barrier N-1 signal rounds.
#include "collectives/generators/common.hpp"

#include <tuple>

#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "ring";
constexpr uint32_t kChainChunks = 8;
// Pipelining: every slice of a chunk keeps at least 128 KiB (per-slice handshakes stay cheap)
// and at most 32 slices.
const PlanBuilder::BuildOptions kPipelined{0, -1, 32, 128 << 10};
const PlanBuilder::BuildOptions kChainPipelined{0, -1, 8, 128 << 10};

// Entry handshake of a ring: tell the left neighbour this rank has entered (it will write into
// this rank), then wait until the right one has (this rank will write into it).
void ringEntry(PlanBuilder& b, const RingChannels& ring, int r, int w) {
  b.signal(r, w, ring.left[r]);
  b.wait(r, w, ring.right[r]);
}

// Reduce-scatter then all-gather over N chunks of the vector. In step s rank r adds its chunk
// (r-s-1) mod N to the partial sum from the left and passes it on; after N-1 steps rank r holds
// chunk r reduced, and N-1 more steps pass the reduced chunks around. Out of place the partial
// sums land in the receiver's output chunk (overwritten later by the all-gather, after every
// read of it: the chain of signals around the ring orders them), so no scratch is needed; in
// place the output is still the input there, so they land in scratch chunk j (a rank receives
// each chunk once; scratch one vector, N-1 chunks of it used).
plan::Plan allReduce(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req, uint32_t(n));
  RingChannels ring(b);
  const bool inPlace = req.inPlace;
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    const int right = ring.right[r], left = ring.left[r];
    ringEntry(b, ring, r, w);
    auto chunk = [&](int j) { return uint32_t(mod(j, n)); };
    // where the partial sum of chunk j lands on its receiver
    auto partial = [&](int j) { return inPlace ? scr(chunk(j)) : out(chunk(j)); };
    b.putSignal(r, w, right, in(chunk(r - 1)), partial(r - 1));
    for (int s = 1; s < n - 1; ++s) {
      const int j = r - s - 1;
      b.wait(r, w, left);
      b.reducePut(r, w, right, out(chunk(j)), {out(chunk(j)), inPlace ? partial(j) : in(chunk(j))}, partial(j));
      b.signal(r, w, right);
    }
    b.wait(r, w, left);
    b.reduce(r, w, out(chunk(r)), {out(chunk(r)), inPlace ? partial(r) : in(chunk(r))});
    for (int t = 0; t < n - 1; ++t) {
      if (t > 0) b.wait(r, w, left);
      b.putSignal(r, w, right, out(chunk(r - t)), out(chunk(r - t)));
    }
    b.wait(r, w, left);
  }
  return finishPlan(b, kName, kPipelined);
}

// In step t rank r forwards block (r-t) mod N to the right neighbour's output.
plan::Plan allGather(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  RingChannels ring(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    ringEntry(b, ring, r, w);
    b.putSignal(r, w, ring.right[r], in(0), out(uint32_t(r)));
    if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
    for (int t = 1; t < n - 1; ++t) {
      b.wait(r, w, ring.left[r]);
      const uint32_t block = uint32_t(mod(r - t, n));
      b.putSignal(r, w, ring.right[r], out(block), out(block));
    }
    b.wait(r, w, ring.left[r]);
  }
  return finishPlan(b, kName, kPipelined);
}

// In step s rank r adds its block (r-s-1) mod N to the partial sum received from the left in
// scratch slot s-1 and puts the result into the right neighbour's slot s; after N-1 steps rank r
// holds block r reduced. Out of place the last partial goes straight into the output, so N-2
// scratch blocks suffice (N-1 in place).
plan::Plan reduceScatter(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  RingChannels ring(b);
  auto slot = [&](int s) { return (s == n - 2 && !req.inPlace) ? out(0) : scr(uint32_t(s)); };
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    ringEntry(b, ring, r, w);
    b.putSignal(r, w, ring.right[r], in(uint32_t(mod(r - 1, n))), slot(0));
    for (int s = 1; s < n - 1; ++s) {
      b.wait(r, w, ring.left[r]);
      b.reducePut(r, w, ring.right[r], scr(uint32_t(s - 1)), {scr(uint32_t(s - 1)), in(uint32_t(mod(r - s - 1, n)))},
                  slot(s));
      b.signal(r, w, ring.right[r]);
    }
    b.wait(r, w, ring.left[r]);
    b.reduce(r, w, out(0), {slot(n - 2), in(uint32_t(r))});
  }
  return finishPlan(b, kName, kPipelined);
}

// Relative position v = (r - root) mod N on the chain root, root+1, ..., root-1.
int chainRank(const GenerateRequest& req, int v) { return (v + req.root) % req.nranks; }

// Broadcast down the chain root -> root+1 -> ... -> root-1 in kChainChunks chunks: a rank
// forwards chunk i as soon as it has it, so all links work at once after N-1 chunk steps.
plan::Plan broadcast(const GenerateRequest& req) {
  const int n = req.nranks;
  const uint32_t k = kChainChunks;
  PlanBuilder b = startPlan(kName, req, k);
  std::vector<int> down(n, -1), up(n, -1);  // by position: channel to the next / previous rank
  for (int v = 0; v + 1 < n; ++v) std::tie(down[v], up[v + 1]) = b.channelPair(chainRank(req, v), chainRank(req, v + 1));
  for (int v = 0; v < n; ++v) {
    const int r = chainRank(req, v), w = b.worker(r);
    if (v > 0) b.signal(r, w, up[v]);
    if (v + 1 < n) b.wait(r, w, down[v]);
    for (uint32_t i = 0; i < k; ++i) {
      if (v > 0) b.wait(r, w, up[v]);
      if (v + 1 < n) b.putSignal(r, w, down[v], v == 0 ? in(i) : out(i), out(i));
    }
    if (v == 0 && !req.inPlace) b.copy(r, w, in(0), out(0), k);
  }
  return finishPlan(b, kName, kChainPipelined);
}

// Reduce along the chain root+1 -> root+2 -> ... -> root-1 -> root in kChainChunks chunks: each
// rank adds its input to the partial sum from the previous one and passes it on. The partial
// sums land in the receiver's output (unspecified on non-roots, overwritten at the root), or in
// scratch when in place (the output is still the input there).
plan::Plan reduce(const GenerateRequest& req) {
  const int n = req.nranks;
  const uint32_t k = kChainChunks;
  PlanBuilder b = startPlan(kName, req, k);
  // position p = 0 .. N-1 along the chain: rank root+1+p; the root is last
  auto rankAt = [&](int p) { return chainRank(req, p + 1); };
  std::vector<int> down(n, -1), up(n, -1);
  for (int p = 0; p + 1 < n; ++p) std::tie(down[p], up[p + 1]) = b.channelPair(rankAt(p), rankAt(p + 1));
  auto landing = [&](uint32_t i) { return req.inPlace ? scr(i) : out(i); };
  for (int p = 0; p < n; ++p) {
    const int r = rankAt(p), w = b.worker(r);
    if (p > 0) b.signal(r, w, up[p]);
    if (p + 1 < n) b.wait(r, w, down[p]);
    for (uint32_t i = 0; i < k; ++i) {
      if (p == 0) {
        b.putSignal(r, w, down[p], in(i), landing(i));
        continue;
      }
      b.wait(r, w, up[p]);
      const std::vector<Ref> srcs{out(i), req.inPlace ? scr(i) : in(i)};
      if (p + 1 < n) {
        b.reducePut(r, w, down[p], out(i), srcs, landing(i));
        b.signal(r, w, down[p]);
      } else {
        b.reduce(r, w, out(i), srcs);
      }
    }
  }
  return finishPlan(b, kName, kChainPipelined);
}

// N-1 rounds of "signal right, wait left": after round t a rank has heard, through the chain,
// from the t ranks on its left, so after N-1 rounds from everyone.
plan::Plan barrier(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  RingChannels ring(b);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    for (int t = 0; t < req.nranks - 1; ++t) {
      b.signal(r, w, ring.right[r]);
      b.wait(r, w, ring.left[r]);
    }
  }
  return finishPlan(b, kName);
}

plan::Plan generateRing(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllReduce: return allReduce(req);
    case C::AllGather: return allGather(req);
    case C::ReduceScatter: return reduceScatter(req);
    case C::Broadcast: return broadcast(req);
    case C::Reduce: return reduce(req);
    case C::SendRecv: return shiftSendRecv(kName, req);
    case C::Barrier: return barrier(req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "ring: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& ringAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "neighbours only; bandwidth-optimal, N-1 steps per phase; chains for broadcast/reduce",
      {C::AllReduce, C::AllGather, C::ReduceScatter, C::Broadcast, C::Reduce, C::SendRecv, C::Barrier},
      generateRing};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
