#include "graph/group_flow.hpp"

#include <algorithm>
#include <stdexcept>

namespace forestcc::graph {

namespace {

int lowestBit(Word w) { return __builtin_ctzll(w); }
bool hasBit(const std::vector<Word>& bits, int i) { return (bits[i / 64] >> (i % 64)) & 1; }

}  // namespace

void GroupFlow::setGraph(int n, const std::vector<Cap>& capIn,
                         const std::vector<std::vector<int>>& neighbours) {
  n_ = n;
  std::vector<std::vector<Cap>> outCaps(n), inCaps(n);
  for (int v = 0; v < n; ++v)
    for (int u : neighbours[v]) {
      outCaps[v].push_back(capIn[static_cast<size_t>(u) * n + v]);
      inCaps[v].push_back(capIn[static_cast<size_t>(v) * n + u]);
    }
  buildLinks(neighbours, outCaps, inCaps);
  hubIn_.assign(n, {});
  rankDist_.assign(n, -1);
  rankCursor_.assign(n, 0);
}

// Lays out the links rank by rank, each rank's sorted by neighbour, and pairs the mirrors.
// outCaps[v][i] / inCaps[v][i]: capacities of v -> neighbours[v][i] and back.
void GroupFlow::buildLinks(const std::vector<std::vector<int>>& neighbours,
                           const std::vector<std::vector<Cap>>& outCaps,
                           const std::vector<std::vector<Cap>>& inCaps) {
  links_.clear();
  first_.assign(n_ + 1, 0);
  for (int v = 0; v < n_; ++v) {
    first_[v] = links_.size();
    std::vector<size_t> order(neighbours[v].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return neighbours[v][a] < neighbours[v][b]; });
    for (size_t i : order) links_.push_back({neighbours[v][i], -1, outCaps[v][i], inCaps[v][i], 0});
  }
  first_[n_] = links_.size();
  for (int v = 0; v < n_; ++v)
    for (size_t a = first_[v]; a < first_[v + 1]; ++a)
      links_[a].mirror = linkOf(links_[a].to, v);
  touched_.clear();
}

int GroupFlow::linkOf(int u, int v) const {
  const auto begin = links_.begin() + first_[u], end = links_.begin() + first_[u + 1];
  const auto it = std::lower_bound(begin, end, v, [](const Link& l, int to) { return l.to < to; });
  if (it == end || it->to != v) throw std::logic_error("GroupFlow: ranks that are not neighbours");
  return static_cast<int>(it - links_.begin());
}

void GroupFlow::changeCapacity(int u, int v, Cap delta) {
  Link& l = links_[linkOf(u, v)];
  l.out += delta;
  links_[l.mirror].in += delta;
}

void GroupFlow::dropEmptyArcs() {
  std::vector<std::vector<int>> neighbours(n_);
  std::vector<std::vector<Cap>> outCaps(n_), inCaps(n_);
  for (int v = 0; v < n_; ++v)
    for (size_t a = first_[v]; a < first_[v + 1]; ++a) {
      const Link& l = links_[a];
      if (l.out <= 0 && l.in <= 0) continue;
      neighbours[v].push_back(l.to);
      outCaps[v].push_back(l.out);
      inCaps[v].push_back(l.in);
    }
  buildLinks(neighbours, outCaps, inCaps);
}

void GroupFlow::pushLink(size_t link, Cap amount) {
  Link& l = links_[link];
  if (l.flow == 0) touched_.push_back(link);
  l.flow += amount;
  links_[l.mirror].flow -= amount;
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
    links_[a].flow = 0;
    links_[links_[a].mirror].flow = 0;
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
  auto take = [&](int j, size_t link, Cap amount) {  // hub j sends amount along the link's to -> sink
    hubFlow(j, links_[link].to) += amount;
    used_[j] += amount;
    if (used_[j] == supply_[j]) supplied_[j / 64] &= ~(Word(1) << (j % 64));
    pushLink(links_[link].mirror, amount);
    total += amount;
  };
  // Straight paths hub -> x -> sink: every in-neighbour x of the sink passes on what the groups
  // holding x still supply, as far as its arc allows.
  for (size_t a = first_[sink]; a < first_[sink + 1]; ++a) {
    const int x = links_[a].to;
    Cap room = inRoom(links_[a]);
    const std::vector<Word>& groups = memberOf[x];
    // The caller's bitsets may be wider than supplied_ (tree packing widens memberOf by doubling).
    const size_t span = std::min(groups.size(), supplied_.size());
    for (size_t w = 0; w < span && room > 0 && total < limit; ++w) {
      for (Word bits = supplied_[w] & groups[w]; bits != 0 && room > 0 && total < limit;
           bits &= bits - 1) {
        const int j = static_cast<int>(w * 64) + lowestBit(bits);
        const Cap amount = std::min({room, supply_[j] - used_[j], limit - total});
        take(j, a, amount);
        room -= amount;
      }
    }
    if (x == extraRank_ && hasBit(supplied_, extra_) && room > 0 && total < limit)
      take(extra_, a, std::min({room, supply_[extra_] - used_[extra_], limit - total}));
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
  Word& word = unlabelled_[j / 64];
  word &= ~(Word(1) << (j % 64));
  if (word == 0) unlabelledWords_[j / 4096] &= ~(Word(1) << (j / 64 % 64));
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
  unlabelledWords_.assign(unlabelled_.size() / 64 + 1, 0);
  for (size_t w = 0; w < unlabelled_.size(); ++w)
    if (unlabelled_[w]) unlabelledWords_[w / 64] |= Word(1) << (w % 64);
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
    const size_t span = std::min(groups.size(), unlabelled_.size());
    for (size_t u = 0; u < unlabelledWords_.size(); ++u)
      for (Word some = unlabelledWords_[u]; some != 0; some &= some - 1) {
        const size_t w = u * 64 + lowestBit(some);
        if (w >= span) break;
        for (Word bits = unlabelled_[w] & groups[w]; bits != 0; bits &= bits - 1) {
          const int j = static_cast<int>(w * 64) + lowestBit(bits);
          if (j != extra_) label(j, d + 1);
        }
      }
    if (v == extraRank_ && isActive(extra_) && hubDist_[extra_] < 0) label(extra_, d + 1);
    for (size_t a = first_[v]; a < first_[v + 1]; ++a) {
      const Link& l = links_[a];
      if (rankDist_[l.to] < 0 && inRoom(l) > 0) rankAt(l.to, d + 1);
    }
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
    for (size_t a = first_[u]; a < first_[u + 1]; ++a) {
      const Link& l = links_[a];
      if (!side[l.to] && outRoom(l) > 0) reachRank(l.to);
    }
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
  const size_t first = first_[v], ranks = first_[v + 1] - first;
  const std::vector<int>& hubs = hubIn_[v];
  for (size_t& c = rankCursor_[v]; c < ranks + hubs.size(); ++c) {
    Cap got = 0;
    if (c < ranks) {
      const Link& l = links_[first + c];
      if (rankDist_[l.to] != d - 1) continue;
      const Cap room = outRoom(l);
      if (room <= 0) continue;
      got = pushFromRank(l.to, std::min(want - pushed, room), sink);
      if (got > 0) pushLink(first + c, got);
    } else {
      const int j = hubs[c - ranks];
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
