#include "graph/group_flow.hpp"

#include <algorithm>

namespace forestcc::graph {

namespace {

int lowestBit(Word w) { return __builtin_ctzll(w); }
bool hasBit(const std::vector<Word>& bits, int i) { return (bits[i / 64] >> (i % 64)) & 1; }

}  // namespace

void GroupFlow::setGraph(int n, const std::vector<Cap>* capIn,
                         std::vector<std::vector<int>> neighbours) {
  n_ = n;
  capIn_ = capIn;
  neighbours_ = std::move(neighbours);
  flow_.assign(static_cast<size_t>(n) * n, 0);
  touched_.clear();
  hubIn_.assign(n, {});
  rankDist_.assign(n, -1);
  rankCursor_.assign(n, 0);
}

void GroupFlow::dropEmptyArcs() {
  for (int v = 0; v < n_; ++v) {
    std::vector<int>& list = neighbours_[v];
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](int u) {
                                return (*capIn_)[static_cast<size_t>(v) * n_ + u] <= 0 &&
                                       (*capIn_)[static_cast<size_t>(u) * n_ + v] <= 0;
                              }),
               list.end());
  }
}

void GroupFlow::pushRank(int u, int v, Cap amount) {
  const size_t a = static_cast<size_t>(u) * n_ + v, b = static_cast<size_t>(v) * n_ + u;
  if (flow_[a] == 0 && flow_[b] == 0) touched_.push_back(std::min(a, b));
  flow_[a] += amount;
  flow_[b] -= amount;
}

Cap& GroupFlow::hubFlow(int j, int v) {
  std::vector<std::pair<int, Cap>>& out = hubOut_[j];
  if (out.empty()) hubsUsed_.push_back(j);
  for (auto& [rank, amount] : out)
    if (rank == v) return amount;
  if (hubIn_[v].empty()) ranksFed_.push_back(v);
  hubIn_[v].push_back(j);
  out.push_back({v, 0});
  return out.back().second;
}

void GroupFlow::clear() {
  for (size_t a : touched_) {
    flow_[a] = 0;
    flow_[(a % n_) * n_ + a / n_] = 0;
  }
  touched_.clear();
  for (int j : hubsUsed_) {
    hubOut_[j].clear();
    used_[j] = 0;
  }
  hubsUsed_.clear();
  for (int v : ranksFed_) hubIn_[v].clear();
  ranksFed_.clear();
}

Cap GroupFlow::run(int sink, const std::vector<Word>& active, const std::vector<Cap>& supply,
                   const std::vector<std::vector<Word>>& memberOf,
                   const std::vector<const std::vector<Word>*>& members, Cap limit, int extraRank,
                   Cap extraSupply, std::vector<char>* sourceSide) {
  extra_ = static_cast<int>(supply.size());
  extraRank_ = extraRank;
  const size_t hubs = supply.size() + 1, words = hubs / 64 + 1;
  if (used_.size() < hubs) {
    used_.resize(hubs, 0);
    hubOut_.resize(hubs);
  }
  supply_.assign(supply.begin(), supply.end());
  supply_.push_back(extraRank >= 0 ? extraSupply : 0);
  members_.assign(members.begin(), members.end());
  extraMembers_.assign((n_ + 63) / 64, 0);
  if (extraRank >= 0) extraMembers_[extraRank / 64] |= Word(1) << (extraRank % 64);
  members_.push_back(&extraMembers_);
  active_.assign(words, 0);
  std::copy(active.begin(), active.begin() + std::min(active.size(), words), active_.begin());
  if (extraRank >= 0 && extraSupply > 0) active_[extra_ / 64] |= Word(1) << (extra_ % 64);
  supplied_ = active_;
  hubDist_.assign(hubs, -1);
  hubCursor_.resize(hubs);
  Cap total = 0;
  auto take = [&](int j, int x, Cap amount) {  // hub j sends amount along x -> sink
    hubFlow(j, x) += amount;
    used_[j] += amount;
    if (used_[j] == supply_[j]) supplied_[j / 64] &= ~(Word(1) << (j % 64));
    pushRank(x, sink, amount);
    total += amount;
  };
  // Straight paths hub -> x -> sink: every in-neighbour x of the sink passes on what the groups
  // holding x still supply, as far as its arc allows.
  for (int x : neighbours_[sink]) {
    Cap room = residual(x, sink);
    const std::vector<Word>& groups = memberOf[x];
    // The caller's bitsets may be wider than supplied_ (tree packing widens memberOf by doubling).
    const size_t span = std::min(groups.size(), supplied_.size());
    for (size_t w = 0; w < span && room > 0 && total < limit; ++w) {
      for (Word bits = supplied_[w] & groups[w]; bits != 0 && room > 0 && total < limit;
           bits &= bits - 1) {
        const int j = static_cast<int>(w * 64) + lowestBit(bits);
        const Cap amount = std::min({room, supply_[j] - used_[j], limit - total});
        take(j, x, amount);
        room -= amount;
      }
    }
    if (x == extraRank_ && hasBit(supplied_, extra_) && room > 0 && total < limit)
      take(extra_, x, std::min({room, supply_[extra_] - used_[extra_], limit - total}));
    if (total == limit) break;
  }
  // Dinic's phases for the rest.
  while (total < limit && levels(sink, memberOf)) {
    for (int j : starts_) {
      if (total == limit) break;
      const Cap want = std::min(limit - total, supply_[j] - used_[j]);
      if (want <= 0) {  // an active group without supply: never a start again, or no phase ends
        supplied_[j / 64] &= ~(Word(1) << (j % 64));
        continue;
      }
      const Cap got = pushFromHub(j, want, sink);
      used_[j] += got;
      if (used_[j] == supply_[j]) supplied_[j / 64] &= ~(Word(1) << (j % 64));
      total += got;
    }
  }
  if (total < limit && sourceSide) reachFromSource(*sourceSide);
  clear();
  return total;
}

// Hub j at distance d from the sink: a blocking flow starts there when it has supply left.
void GroupFlow::label(int j, int d) {
  hubDist_[j] = d;
  unlabelled_[j / 64] &= ~(Word(1) << (j % 64));
  hubCursor_[j] = 0;
  if (hasBit(supplied_, j)) starts_.push_back(j);
  else queue_.push_back(-1 - j);
}

// Distances to the sink by a breadth-first search backwards through the residual graph, up to the
// nearest hubs with supply left (starts_); false when no such hub is reached (the flow is maximum).
bool GroupFlow::levels(int sink, const std::vector<std::vector<Word>>& memberOf) {
  std::fill(rankDist_.begin(), rankDist_.end(), -1);
  std::fill(hubDist_.begin(), hubDist_.end(), -1);
  for (std::vector<Word>& bits : ranksAt_) std::fill(bits.begin(), bits.end(), 0);
  starts_.clear();
  queue_.clear();
  unlabelled_ = active_;
  auto rankAt = [&](int v, int d) {
    rankDist_[v] = d;
    rankCursor_[v] = 0;
    while (static_cast<int>(ranksAt_.size()) <= d) ranksAt_.emplace_back((n_ + 63) / 64, 0);
    ranksAt_[d][v / 64] |= Word(1) << (v % 64);
    queue_.push_back(v);
  };
  rankAt(sink, 0);
  for (size_t qi = 0; qi < queue_.size(); ++qi) {
    const int node = queue_[qi];
    if (node < 0) {  // hub j: a member u whose flow from j can move reaches it
      const int j = -1 - node;
      for (const auto& [u, amount] : hubOut_[j])
        if (amount > 0 && rankDist_[u] < 0) rankAt(u, hubDist_[j] + 1);
      continue;
    }
    const int v = node, d = rankDist_[v];
    // Every node nearer than the nearest hubs with supply is labelled: the level graph is done.
    if (!starts_.empty() && d >= hubDist_[starts_.front()]) break;
    const std::vector<Word>& groups = memberOf[v];
    for (size_t w = 0; w < groups.size() && w < unlabelled_.size(); ++w)
      for (Word bits = unlabelled_[w] & groups[w]; bits != 0; bits &= bits - 1) {
        const int j = static_cast<int>(w * 64) + lowestBit(bits);
        if (j != extra_) label(j, d + 1);
      }
    if (v == extraRank_ && isActive(extra_) && hubDist_[extra_] < 0) label(extra_, d + 1);
    for (int u : neighbours_[v])
      if (rankDist_[u] < 0 && residual(u, v) > 0) rankAt(u, d + 1);
  }
  return !starts_.empty();
}

// The ranks the source reaches in the residual network of a maximum flow: hubs with supply left
// and their ranks, then residual rank arcs, and hubs whose flow into a reached rank could be sent
// back (the hub then reaches all its ranks). extraRank_ stands for an unbounded source arc.
void GroupFlow::reachFromSource(std::vector<char>& side) {
  side.assign(n_, 0);
  std::vector<char> hubReached(supply_.size(), 0);
  queue_.clear();
  auto reachRank = [&](int v) {
    if (side[v]) return;
    side[v] = 1;
    queue_.push_back(v);
  };
  auto reachHub = [&](int j) {
    if (hubReached[j]) return;
    hubReached[j] = 1;
    const std::vector<Word>& ranks = *members_[j];
    for (size_t w = 0; w < ranks.size(); ++w)
      for (Word bits = ranks[w]; bits != 0; bits &= bits - 1)
        reachRank(static_cast<int>(w * 64) + lowestBit(bits));
  };
  for (size_t j = 0; j < supply_.size(); ++j)
    if (hasBit(supplied_, static_cast<int>(j))) reachHub(static_cast<int>(j));
  if (extraRank_ >= 0) reachRank(extraRank_);
  for (size_t qi = 0; qi < queue_.size(); ++qi) {
    const int u = queue_[qi];
    for (int w : neighbours_[u])
      if (!side[w] && residual(u, w) > 0) reachRank(w);
    for (int j : hubIn_[u])
      if (hubFlow(j, u) > 0) reachHub(j);
  }
}

// Depth-first blocking flow: pushes up to `want` from hub j to the sink along arcs one step nearer
// it; a node that can take no more is marked dead for the rest of the phase.
Cap GroupFlow::pushFromHub(int j, Cap want, int sink) {
  const int d = hubDist_[j];
  if (d <= 0) return 0;
  const std::vector<Word>& next = ranksAt_[d - 1];
  const std::vector<Word>& member = *members_[j];
  Cap pushed = 0;
  for (size_t& w = hubCursor_[j]; w < next.size(); ++w) {
    for (Word bits = member[w] & next[w]; bits != 0; bits &= bits - 1) {
      const int u = static_cast<int>(w * 64) + lowestBit(bits);
      if (rankDist_[u] != d - 1) continue;
      const Cap got = pushFromRank(u, want - pushed, sink);
      if (got > 0) {
        hubFlow(j, u) += got;
        pushed += got;
        if (pushed == want) return pushed;  // keep the cursor: u may take more
      }
    }
  }
  hubDist_[j] = -1;
  return pushed;
}

Cap GroupFlow::pushFromRank(int v, Cap want, int sink) {
  if (v == sink) return want;
  const int d = rankDist_[v];
  Cap pushed = 0;
  // Its arcs in one list: rank arcs first, then the hubs whose flow into v can move elsewhere.
  const std::vector<int>& ranks = neighbours_[v];
  const std::vector<int>& hubs = hubIn_[v];
  for (size_t& c = rankCursor_[v]; c < ranks.size() + hubs.size(); ++c) {
    Cap got = 0;
    if (c < ranks.size()) {
      const int w = ranks[c];
      if (rankDist_[w] != d - 1) continue;
      const Cap room = residual(v, w);
      if (room <= 0) continue;
      got = pushFromRank(w, std::min(want - pushed, room), sink);
      if (got > 0) pushRank(v, w, got);
    } else {
      const int j = hubs[c - ranks.size()];
      if (hubDist_[j] != d - 1) continue;
      const Cap moved = hubFlow(j, v);
      if (moved <= 0) continue;
      got = pushFromHub(j, std::min(want - pushed, moved), sink);
      hubFlow(j, v) -= got;  // hubOut_[j] may have grown: no reference kept across the push
    }
    pushed += got;
    if (pushed == want) return pushed;
  }
  rankDist_[v] = -1;
  ranksAt_[d][v / 64] &= ~(Word(1) << (v % 64));
  return pushed;
}

}  // namespace forestcc::graph
