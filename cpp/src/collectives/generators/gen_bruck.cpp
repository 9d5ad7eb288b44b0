// Bruck's algorithms: ceil(log2 N) steps for any N, each to the rank at distance 2^j, for
// latency-bound (small) messages.
//
// all_gather: in step j rank r puts the min(2^j, N-2^j) blocks it holds, r, r+1, ... (mod N),
// into rank r-2^j's output at their final places; puts land where they belong, so the final
// rotation of the textbook algorithm disappears. Sends (N-1)/N n; no scratch.
// all_to_all: position i of rank x holds the block that must travel i ranks on (initially
// x's block for rank x+i). In step j every position with bit j set moves 2^j ranks on; a block
// whose last step this is lands in the receiver's output, the others in a scratch slot of their
// own (sum over i < N of popcount(i)-1 slots, about (N/2)(log2 N - 2) blocks). Sends about
// (n/2) ceil(log2 N); in place the input is first copied to scratch (N-1 more blocks).
// barrier: dissemination, ceil(log2 N) rounds of "signal r+2^j, wait r-2^j".
#include <tuple>

#include "collectives/generators/common.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "bruck";

// Per step j (distance 2^j): toward[j][r] is r's channel to r + sign*2^j, from[j][r] its
// channel to r - sign*2^j (partners of each other's).
//
// Entry: the rank written to in step j says it entered on from[], except in a last step with
// 2d > N: by then the writer has heard (through the data it received) from the 2d-1 ranks
// behind it, the target among them.
struct Steps {
  Steps(PlanBuilder& b, int sign) {
    const int n = b.nranks();
    for (int d = 1; d < n; d *= 2) {
      distances.push_back(d);
      toward.emplace_back(n), from.emplace_back(n);
      for (int r = 0; r < n; ++r) {
        const int peer = mod(r + sign * d, n);
        std::tie(toward.back()[r], from.back()[peer]) = b.channelPair(r, peer);
      }
    }
  }
  bool needsEntry(size_t j, int n) const { return 2 * distances[j] <= n; }
  std::vector<int> distances;
  std::vector<std::vector<int>> toward, from;
};

// Puts the chunks [first, first+count) mod N of this rank's `buffer` to the same places of the
// peer's output, as one or two puts.
void putWrapped(PlanBuilder& b, int r, int w, int ch, plan::Buffer buffer, int first, int count) {
  const int n = b.nranks();
  const int head = std::min(count, n - first);
  b.put(r, w, ch, {buffer, uint32_t(first)}, out(uint32_t(first)), uint32_t(head));
  if (count > head) b.put(r, w, ch, {buffer, 0}, out(0), uint32_t(count - head));
}

plan::Plan allGather(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  Steps steps(b, -1);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r);
    for (size_t j = 0; j < steps.distances.size(); ++j)
      if (steps.needsEntry(j, n)) b.signal(r, w, steps.from[j][r]);
    for (size_t j = 0; j < steps.distances.size(); ++j) {
      const int d = steps.distances[j], count = std::min(d, n - d);
      const int ch = steps.toward[j][r];
      if (steps.needsEntry(j, n)) b.wait(r, w, ch);
      if (j == 0) {
        b.put(r, w, ch, in(0), out(uint32_t(r)));
        if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
      } else {
        putWrapped(b, r, w, ch, plan::Buffer::Output, r, count);
      }
      b.signal(r, w, ch);
      b.wait(r, w, steps.from[j][r]);
    }
  }
  return finishPlan(b, kName);
}

plan::Plan allToAll(const GenerateRequest& req) {
  const int n = req.nranks;
  PlanBuilder b = startPlan(kName, req);
  Steps steps(b, +1);
  const size_t nsteps = steps.distances.size();
  // Scratch: a slot per (step, position) that is not the position's last step, then (in place)
  // the staged input.
  std::vector<std::vector<int>> slot(nsteps, std::vector<int>(n, -1));
  uint32_t used = 0;
  for (size_t j = 0; j < nsteps; ++j)
    for (int i = 1; i < n; ++i)
      if ((i >> j) & 1 && (i >> (j + 1)) != 0) slot[j][i] = int(used++);
  const uint32_t staged = used;
  // loc[x][i]: where rank x holds position i now
  std::vector<std::vector<Ref>> loc(n, std::vector<Ref>(n));
  for (int x = 0; x < n; ++x)
    for (int i = 1; i < n; ++i) {
      const int block = (x + i) % n;
      loc[x][i] = req.inPlace ? scr(staged + uint32_t(slotOf(block, x))) : in(uint32_t(block));
    }
  std::vector<int> workers(n);
  for (int x = 0; x < n; ++x) {
    workers[x] = b.worker(x);
    if (req.inPlace) {
      if (x > 0) b.copy(x, workers[x], in(0), scr(staged), uint32_t(x));
      if (x < n - 1) b.copy(x, workers[x], in(uint32_t(x + 1)), scr(staged + uint32_t(x)), uint32_t(n - 1 - x));
    } else {
      b.copy(x, workers[x], in(uint32_t(x)), out(uint32_t(x)));
    }
    for (size_t j = 0; j < nsteps; ++j)
      if (steps.needsEntry(j, n)) b.signal(x, workers[x], steps.from[j][x]);
  }
  for (size_t j = 0; j < nsteps; ++j) {
    const int d = steps.distances[j];
    std::vector<std::vector<Ref>> next = loc;
    for (int x = 0; x < n; ++x) {
      const int w = workers[x], y = (x + d) % n, ch = steps.toward[j][x];
      std::vector<Transfer> transfers;
      for (int i = 1; i < n; ++i) {
        if (!((i >> j) & 1)) continue;
        const Ref dst = slot[j][i] >= 0 ? scr(uint32_t(slot[j][i])) : out(uint32_t(mod(y - i, n)));
        transfers.push_back({loc[x][i], dst});
        next[y][i] = dst;
      }
      if (steps.needsEntry(j, n)) b.wait(x, w, ch);
      putTransfers(b, x, w, ch, transfers);
      b.signal(x, w, ch);
      b.wait(x, w, steps.from[j][x]);
    }
    loc.swap(next);
  }
  return finishPlan(b, kName);
}

plan::Plan barrier(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Steps steps(b, +1);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r);
    for (size_t j = 0; j < steps.distances.size(); ++j) {
      b.signal(r, w, steps.toward[j][r]);
      b.wait(r, w, steps.from[j][r]);
    }
  }
  return finishPlan(b, kName);
}

plan::Plan generateBruck(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllGather: return allGather(req);
    case C::AllToAll: return allToAll(req);
    case C::Barrier: return barrier(req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "bruck: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& bruckAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "ceil(log2 N) steps at distances 2^j, any N (small messages)",
      {C::AllGather, C::AllToAll, C::Barrier}, generateBruck};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
