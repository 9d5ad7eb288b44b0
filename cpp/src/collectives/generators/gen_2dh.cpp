// 2DH all_to_all (two-dimensional hierarchical; Tutel, MLSys 2023): messages across nodes go
// only between rail partners (the ranks with the same local index; node_layout.hpp) and each
// carries a whole node's blocks for one destination, so a rank sends N-1 large messages across
// nodes instead of (N-1) m small ones.
//
// Rank r (node a, local index i) and destination d on node b, relay = d's rail partner on
// node a (d itself when b = a):
//   1. intra-node: r puts into each local peer q the blocks q relays: its block for q straight
//      into q's output, and for every d that q relays, block d into q's scratch slot
//      [d's place among q's relayed ranks][i]. Tutel's first local transform ([dst node]
//      [dst local] -> [dst local][dst node]) is done by these puts' addresses, not by a pass.
//      Its own relayed blocks r copies into its own slots (one local copy of (N-1)/N of its
//      input over m), so that every message of step 2 is one contiguous run.
//   2. inter-node: for each d it relays, r puts the m slots of d (blocks from every rank of node
//      a) into d's output at the blocks of node a's ranks: one put when ranks are numbered node
//      by node (the second transform is again the address), else one per run.
// Per rank, with n the send buffer, m ranks per node and N nodes: 2 steps; intra-node it puts
// (m-1)/m n in (m-1) N pieces, inter-node (N-1)/N n in N-1 messages (flat: the same bytes in
// (N-1) m messages); scratch (N-1) m blocks. Uneven nodes: a smaller node's ranks relay for several
// local indices. One rank per node is a direct exchange; one node is direct all_to_all by puts.
// In place the input is first staged in scratch (as direct does), the relay slots after it.
#include <algorithm>

#include "collectives/generators/common.hpp"
#include "collectives/generators/node_layout.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "2dh";

int intra(ChannelMap& ch, int rank, int peer) {
  return rank < peer ? ch.at(rank, rank, peer) : ch.at(rank, peer, rank);
}

plan::Plan allToAll(const GenerateRequest& req) {
  const NodeLayout nodes(req);
  const int n = req.nranks, N = nodes.nodes();
  // The ranks on other nodes each rank relays for, in rank order, and d's place in the list of
  // its relay on each node.
  std::vector<std::vector<int>> relayed(n);
  std::vector<std::vector<uint32_t>> place(N, std::vector<uint32_t>(n, 0));  // [relay's node][d]
  for (int d = 0; d < n; ++d)
    for (int c = 0; c < N; ++c)
      if (c != nodes.node(d)) {
        std::vector<int>& list = relayed[nodes.railOf(c, d)];
        place[c][d] = uint32_t(list.size());
        list.push_back(d);
      }
  PlanBuilder b = startPlan(kName, req);
  // In place the input (all blocks but the rank's own) is staged in scratch [0, n-1) first.
  const uint32_t staged = req.inPlace ? uint32_t(n - 1) : 0;
  auto input = [&](int r, int d) { return req.inPlace ? scr(uint32_t(slotOf(d, r))) : in(uint32_t(d)); };
  // Slot of the block from local index i to d, in the scratch of d's relay on the sender's node.
  auto slot = [&](int relay, int d, int i) {
    const int c = nodes.node(relay);
    return scr(staged + place[c][d] * uint32_t(nodes.size(c)) + uint32_t(i));
  };
  ChannelMap ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r), a = nodes.node(r), i = nodes.local(r), m = nodes.size(a);
    const std::vector<int> peers = nodes.localPeers(r);
    if (req.inPlace) stageAllToAllInput(b, r, w);
    for (int q : peers) b.signal(r, w, intra(ch, r, q));
    for (int c = 0; c < N; ++c)
      if (c != a) b.signal(r, w, ch.at(r, nodes.railOf(c, r), r));
    if (!req.inPlace) b.copy(r, w, in(uint32_t(r)), out(uint32_t(r)));
    if (m > 1)
      for (int d : relayed[r]) b.copy(r, w, input(r, d), slot(r, d, i));
    for (int q : peers) {
      const int c = intra(ch, r, q);
      b.wait(r, w, c);
      b.put(r, w, c, input(r, q), out(uint32_t(r)));
      for (int d : relayed[q]) b.put(r, w, c, input(r, d), slot(q, d, i));
      b.signal(r, w, c);
    }
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
    for (int d : relayed[r]) {
      const int c = ch.at(r, r, d);
      std::vector<Transfer> blocks;
      for (int j = 0; j < m; ++j)
        blocks.push_back({m > 1 ? slot(r, d, j) : input(r, d), out(uint32_t(nodes.members(a)[j]))});
      b.wait(r, w, c);
      putTransfers(b, r, w, c, blocks);
      b.signal(r, w, c);
    }
    for (int c = 0; c < N; ++c)
      if (c != a) b.wait(r, w, ch.at(r, nodes.railOf(c, r), r));
  }
  // What each scratch block holds, so all_to_all_v can size it from the call's counts: the
  // staged input (in place), then the relay slots [d's place][local index of the source].
  for (int r = 0; r < n; ++r) {
    const int a = nodes.node(r), m = nodes.size(a);
    std::vector<plan::BlockSource> blocks;
    for (uint32_t t = 0; t < staged; ++t) blocks.push_back({r, int(t) < r ? int(t) : int(t) + 1});
    if (m > 1) {
      blocks.resize(staged + relayed[r].size() * m);
      for (int d : relayed[r])
        for (int i = 0; i < m; ++i) blocks[slot(r, d, i).index] = {nodes.members(a)[i], d};
    }
    b.setScratchBlocks(r, std::move(blocks));
  }
  b.setParam("nodes", N);
  // One slice: every transfer is one copy (the data is not read again).
  return finishPlan(b, kName, PlanBuilder::BuildOptions{0, -1, 1, 0});
}

plan::Plan generate2dh(const GenerateRequest& req) {
  if (req.nranks == 1) return singleRankPlan(kName, req);
  if (req.collective == plan::Collective::AllToAll) return allToAll(req);
  throw Error(ErrorCode::Internal, "2dh: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& twoDimensionalAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "several nodes: all_to_all in two steps, within nodes then between rail partners (Tutel's 2DH)",
      {C::AllToAll}, generate2dh, nullptr, true};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
