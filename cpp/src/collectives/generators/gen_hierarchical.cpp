// Hierarchical algorithms for several nodes: the bulk of the work stays inside a node (shared
// memory, where reading peers in place is cheap) and only what must cross nodes does, between
// rail partners (the ranks with the same local index; node_layout.hpp), so every rank drives
// its own share of the inter-node traffic.
//
// N nodes, node a holding m_a ranks, M = the largest m_a; n as in gen_ring.cpp.
//   all_reduce      intra-node reduce_scatter: the vector is M parts, part p owned on node a by
//                   its local rank p mod m_a, which sums it over the node reading the peers'
//                   inputs in place (get_reduce, as direct does). Inter-node all_reduce of each
//                   part among its N owners: a ring (reduce_scatter then all_gather over N
//                   sub-chunks of the part; puts only, partial sums in the receiver's scratch,
//                   one vector of scratch, bandwidth-optimal: 2(N-1)/N of the part crosses
//                   each owner's link); on two nodes the owners swap their node sums instead
//                   (the same n/M each way in one round). Intra-node all_gather: each owner puts
//                   its parts into every local peer. Steps: 2 + 2(N-1) (two nodes: 3); bytes
//                   sent across nodes per rank 2(N-1)/N n/M; k = M N chunks per block.
//   all_gather      inter-node first: each rank puts its block into its rail partner on every
//                   other node (N-1 puts); then intra-node: each rank puts its own block and
//                   the ones it received into every local peer. 2 steps; every block crosses to
//                   each other node once.
//   reduce_scatter  intra-node: the rank on node a that is block d's rail partner sums block d
//                   over the node (get_reduce) for every d it stands for; inter-node: puts that
//                   node partial into d's scratch (one slot per node); d sums its own node's
//                   partial with the N-1 received. 2 steps; every block crosses once per node.
//
// Why these sub-algorithms: inside a node, direct (one hop, copying spread over all ranks) is
// the shared-memory workhorse; across nodes only puts are used (over TCP a read is a round
// trip through both proxies, a put is streamed), a ring for all_reduce (bandwidth-optimal with one vector of scratch at any N) and one
// direct step for all_gather and reduce_scatter (the same bytes as a ring in one step; the data
// already is per-destination blocks). Uneven nodes: a node with fewer ranks has some of them
// stand in for several local indices; one rank per node degenerates to a ring (all_reduce) or a
// direct exchange, one node to a direct plan.
#include <algorithm>

#include "collectives/generators/common.hpp"
#include "collectives/generators/node_layout.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "hierarchical";
// all_reduce: each slice is a round of signals across nodes (a proxy round trip over TCP), so
// slices are large; two nodes exchange whole parts (unsliced).
const PlanBuilder::BuildOptions kPipelined{0, -1, 16, 1 << 20};
// reduce_scatter and all_gather: as direct (reductions sliced to stay in cache, moves whole).
const PlanBuilder::BuildOptions kReducePipelined{0, -1, 32, 64 << 10};
const PlanBuilder::BuildOptions kUnsliced{0, -1, 1, 0};

// Channels between ranks of one node: one pair per two ranks, named smaller rank first.
int intra(ChannelMap& ch, int rank, int peer) {
  return rank < peer ? ch.at(rank, rank, peer) : ch.at(rank, peer, rank);
}

// dst = first (op) every local peer's `remote`, read in place; with no peers a copy (unless dst
// is first). Call once every local peer has said it entered.
void sumOverNode(PlanBuilder& b, ChannelMap& ch, const std::vector<int>& peers, int r, int w, Ref dst, Ref first,
                 Ref remote, uint32_t n) {
  if (peers.empty()) {
    if (first.buffer != dst.buffer || first.index != dst.index) b.copy(r, w, first, dst, n);
    return;
  }
  bool started = false;
  for (int q : peers) {
    b.getReduce(r, w, intra(ch, r, q), dst, {started ? dst : first}, remote, n);
    started = true;
  }
}

plan::Plan allReduce(const GenerateRequest& req) {
  const NodeLayout nodes(req);
  const int N = nodes.nodes(), M = nodes.largest();
  PlanBuilder b = startPlan(kName, req, uint32_t(M * N));
  ChannelMap ch(b);
  auto sub = [&](int p, int j) { return uint32_t(p * N + mod(j, N)); };
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r), a = nodes.node(r);
    const std::vector<int> peers = nodes.localPeers(r);
    std::vector<int> owned;
    for (int p = 0; p < M; ++p)
      if (nodes.at(a, p) == r) owned.push_back(p);
    for (int q : peers) b.signal(r, w, intra(ch, r, q));
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
    // Node sums of the owned parts, in the output.
    for (int p : owned) {
      const Ref part = out(sub(p, 0));
      sumOverNode(b, ch, peers, r, w, part, req.inPlace ? part : in(sub(p, 0)), in(sub(p, 0)), uint32_t(N));
    }
    // Ring over the part's owners, node a at position a (gen_ring.cpp's all_reduce, with the
    // partial sums in scratch because the output holds this node's sums). Parts in increasing
    // order on every rank: a ring waits only on owners that finished the smaller parts.
    // Two nodes: the owners swap their node sums and both add (the ring's bytes, n/M each way,
    // in one round instead of two).
    for (int p : owned) {
      if (N != 2) break;
      const int partner = nodes.at(1 - a, p);
      const int send = ch.at(r, r, partner), recv = ch.at(r, partner, r);
      b.signal(r, w, recv);
      b.wait(r, w, send);
      b.putSignal(r, w, send, out(sub(p, 0)), scr(sub(p, 0)), uint32_t(N));
      b.wait(r, w, recv);
      b.flush(r, w, send);  // the put reads its source (out) asynchronously: done before the sum
      b.reduce(r, w, out(sub(p, 0)), {out(sub(p, 0)), scr(sub(p, 0))}, uint32_t(N));
    }
    for (int p : owned) {
      if (N <= 2) break;
      const int rightRank = nodes.at(mod(a + 1, N), p), leftRank = nodes.at(mod(a - 1, N), p);
      const int right = ch.at(r, r, rightRank), left = ch.at(r, leftRank, r);
      b.signal(r, w, left);
      b.wait(r, w, right);
      b.putSignal(r, w, right, out(sub(p, a - 1)), scr(sub(p, a - 1)));
      for (int s = 1; s < N - 1; ++s) {
        const uint32_t j = sub(p, a - s - 1);
        b.wait(r, w, left);
        b.reducePut(r, w, right, out(j), {out(j), scr(j)}, scr(j));
        b.signal(r, w, right);
      }
      b.wait(r, w, left);
      b.reduce(r, w, out(sub(p, a)), {out(sub(p, a)), scr(sub(p, a))});
      for (int t = 0; t < N - 1; ++t) {
        if (t > 0) b.wait(r, w, left);
        b.putSignal(r, w, right, out(sub(p, a - t)), out(sub(p, a - t)));
      }
      b.wait(r, w, left);
    }
    for (int q : peers) {
      for (int p : owned) b.put(r, w, intra(ch, r, q), out(sub(p, 0)), out(sub(p, 0)), uint32_t(N));
      b.signal(r, w, intra(ch, r, q));
    }
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
  }
  b.setParam("nodes", N);
  return finishPlan(b, kName, N == 2 ? kUnsliced : kPipelined);
}

plan::Plan allGather(const GenerateRequest& req) {
  const NodeLayout nodes(req);
  const int N = nodes.nodes();
  PlanBuilder b = startPlan(kName, req);
  ChannelMap ch(b);
  for (int r = 0; r < req.nranks; ++r) {
    const int w = b.worker(r), a = nodes.node(r);
    const std::vector<int> peers = nodes.localPeers(r);
    std::vector<int> senders, receivers;  // rail partners that put into this rank / it puts into
    for (int c = 0; c < N; ++c) {
      if (c == a) continue;
      receivers.push_back(nodes.railOf(c, r));
      for (int s : nodes.members(c))
        if (nodes.railOf(a, s) == r) senders.push_back(s);
    }
    for (int q : peers) b.signal(r, w, intra(ch, r, q));
    for (int s : senders) b.signal(r, w, ch.at(r, s, r));
    if (!req.inPlace) b.copy(r, w, in(0), out(uint32_t(r)));
    for (int t : receivers) {
      b.wait(r, w, ch.at(r, r, t));
      b.putSignal(r, w, ch.at(r, r, t), in(0), out(uint32_t(r)));
    }
    for (int s : senders) b.wait(r, w, ch.at(r, s, r));
    // Its own block and the received ones, to every local peer (runs of adjacent blocks in one
    // put). Own block first: it is ready before the others arrive.
    std::vector<Transfer> forward{{out(uint32_t(r)), out(uint32_t(r))}};
    for (int s : senders) forward.push_back({out(uint32_t(s)), out(uint32_t(s))});
    for (int q : peers) {
      b.wait(r, w, intra(ch, r, q));
      putTransfers(b, r, w, intra(ch, r, q), forward);
      b.signal(r, w, intra(ch, r, q));
    }
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
  }
  b.setParam("nodes", N);
  return finishPlan(b, kName, kUnsliced);
}

plan::Plan reduceScatter(const GenerateRequest& req) {
  const NodeLayout nodes(req);
  const int N = nodes.nodes(), n = req.nranks;
  // Blocks each rank sums over its node for ranks on other nodes, and where they wait in
  // scratch: slots [0, maxOwned) on the summing rank; then the incoming slots, one per other
  // node (by node number, skipping the receiver's own), at the same place on every rank.
  std::vector<std::vector<int>> standsFor(n);
  size_t maxOwned = 0;
  for (int d = 0; d < n; ++d)
    for (int c = 0; c < N; ++c)
      if (c != nodes.node(d)) standsFor[nodes.railOf(c, d)].push_back(d);
  for (const auto& list : standsFor) maxOwned = std::max(maxOwned, list.size());
  auto incoming = [&](int fromNode, int d) {
    return scr(uint32_t(maxOwned + (fromNode < nodes.node(d) ? fromNode : fromNode - 1)));
  };
  PlanBuilder b = startPlan(kName, req);
  ChannelMap ch(b);
  for (int r = 0; r < n; ++r) {
    const int w = b.worker(r), a = nodes.node(r);
    const std::vector<int> peers = nodes.localPeers(r);
    std::vector<int> senders;
    for (int c = 0; c < N; ++c)
      if (c != a) senders.push_back(nodes.railOf(c, r));
    for (int q : peers) b.signal(r, w, intra(ch, r, q));
    for (int s : senders) b.signal(r, w, ch.at(r, s, r));
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
    // This node's sum of its own block, in the output (in place the output is that block).
    sumOverNode(b, ch, peers, r, w, out(0), req.inPlace ? out(0) : in(uint32_t(r)), in(uint32_t(r)), 1);
    // With no local peers the node's sum of block d is the input block itself.
    auto partial = [&](size_t i) { return peers.empty() ? in(uint32_t(standsFor[r][i])) : scr(uint32_t(i)); };
    for (size_t i = 0; i < standsFor[r].size() && !peers.empty(); ++i) {
      const uint32_t d = uint32_t(standsFor[r][i]);
      sumOverNode(b, ch, peers, r, w, partial(i), in(d), in(d), 1);
    }
    for (int q : peers) b.signal(r, w, intra(ch, r, q));  // done reading the peers' inputs
    for (size_t i = 0; i < standsFor[r].size(); ++i) {
      const int d = standsFor[r][i];
      b.wait(r, w, ch.at(r, r, d));
      b.putSignal(r, w, ch.at(r, r, d), partial(i), incoming(a, d));
    }
    std::vector<Ref> sum{out(0)};
    for (int s : senders) {
      b.wait(r, w, ch.at(r, s, r));
      sum.push_back(incoming(nodes.node(s), r));
    }
    if (sum.size() > 1) b.reduce(r, w, out(0), sum);
    for (int q : peers) b.wait(r, w, intra(ch, r, q));
  }
  b.setParam("nodes", N);
  return finishPlan(b, kName, kReducePipelined);
}

plan::Plan generateHierarchical(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::AllReduce: return allReduce(req);
    case C::AllGather: return allGather(req);
    case C::ReduceScatter: return reduceScatter(req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "hierarchical: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& hierarchicalAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{
      kName, "several nodes: work inside each node, only rail partners (same local index) across nodes",
      {C::AllReduce, C::AllGather, C::ReduceScatter}, generateHierarchical, nullptr, true};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
