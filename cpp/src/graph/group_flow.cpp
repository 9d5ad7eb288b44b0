#include "graph/group_flow.hpp"

#include <algorithm>
#include <limits>

namespace forestcc::graph {

namespace {

int lowestBit(Word w) { return __builtin_ctzll(w); }

}  // namespace

void GroupFlow::setGraph(int n, const std::vector<Cap>* capIn,
                         std::vector<std::vector<int>> neighbours) {
  n_ = n;
  capIn_ = capIn;
  neighbours_ = std::move(neighbours);
  flow_.assign(static_cast<size_t>(n) * n, 0);
  touched_.clear();
  rankSeen_.assign(n, 0);
  stamp_ = 0;
  nextOfRank_.assign(n, 0);
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
}

Cap GroupFlow::run(int sink, const std::vector<Word>& active, const std::vector<Cap>& supply,
                   const std::vector<std::vector<Word>>& memberOf, Cap limit) {
  if (used_.size() < supply.size()) {
    used_.resize(supply.size(), 0);
    hubOut_.resize(supply.size());
  }
  nextOfHub_.resize(supply.size());
  supplied_ = active;
  hubSeen_.assign(active.size(), 0);
  Cap total = 0;
  // Straight paths hub -> x -> sink: every in-neighbour x of the sink passes on what the groups
  // holding x still supply, as far as its arc allows.
  for (int x : neighbours_[sink]) {
    Cap room = residual(x, sink);
    const std::vector<Word>& groups = memberOf[x];
    for (size_t w = 0; w < supplied_.size() && room > 0 && total < limit; ++w) {
      for (Word bits = supplied_[w] & groups[w]; bits != 0 && room > 0 && total < limit;
           bits &= bits - 1) {
        const int j = static_cast<int>(w * 64) + lowestBit(bits);
        const Cap amount = std::min({room, supply[j] - used_[j], limit - total});
        hubFlow(j, x) += amount;
        used_[j] += amount;
        if (used_[j] == supply[j]) supplied_[w] &= ~(Word(1) << (j & 63));
        pushRank(x, sink, amount);
        room -= amount;
        total += amount;
      }
    }
    if (total == limit) break;
  }
  while (total < limit) {
    const Cap more = augment(sink, limit - total, active, supply, memberOf);
    if (more == 0) break;
    total += more;
  }
  clear();
  return total;
}

// Augmenting paths from one breadth-first search backwards from the sink; returns the flow they
// carried (0 when none is left: the flow is maximum).
Cap GroupFlow::augment(int sink, Cap want, const std::vector<Word>& active,
                       const std::vector<Cap>& supply,
                       const std::vector<std::vector<Word>>& memberOf) {
  if (stamp_ == std::numeric_limits<int>::max()) {  // the stamps ran out: forget every old mark
    std::fill(rankSeen_.begin(), rankSeen_.end(), 0);
    stamp_ = 0;
  }
  ++stamp_;
  std::fill(hubSeen_.begin(), hubSeen_.end(), 0);
  queue_.clear();
  starts_.clear();
  queue_.push_back(sink);
  rankSeen_[sink] = stamp_;
  Cap offered = 0;  // what the hubs in starts_ could still supply
  for (size_t qi = 0; qi < queue_.size() && offered < want; ++qi) {
    const int node = queue_[qi];
    if (node < 0) {
      const int j = -1 - node;  // its flow into some member u may move to the member it reaches
      for (const auto& [u, amount] : hubOut_[j]) {
        if (amount <= 0 || rankSeen_[u] == stamp_) continue;
        rankSeen_[u] = stamp_;
        nextOfRank_[u] = node;
        queue_.push_back(u);
      }
      continue;
    }
    const int v = node;
    const std::vector<Word>& groups = memberOf[v];
    for (size_t w = 0; w < active.size(); ++w) {
      const Word fresh = active[w] & groups[w] & ~hubSeen_[w];
      if (fresh == 0) continue;
      hubSeen_[w] |= fresh;
      for (Word bits = fresh; bits != 0; bits &= bits - 1) {
        const int j = static_cast<int>(w * 64) + lowestBit(bits);
        nextOfHub_[j] = v;
        if ((supplied_[w] >> (j & 63)) & 1) {
          starts_.push_back(j);  // a path's first hub: it is fed by the source, no need to expand
          offered += supply[j] - used_[j];
        } else {
          queue_.push_back(-1 - j);
        }
      }
    }
    for (int u : neighbours_[v]) {
      if (rankSeen_[u] == stamp_ || residual(u, v) <= 0) continue;
      rankSeen_[u] = stamp_;
      nextOfRank_[u] = v;
      queue_.push_back(u);
    }
  }
  Cap total = 0;
  for (int start : starts_) {
    if (total == want) break;
    total += carry(sink, start, want - total, supply);
  }
  return total;
}

// Sends as much as it can, up to want, along the search tree's path from hub `start` to the sink:
// bounded by the hub's supply, the rank arcs' residuals, and the hub flows moved off a member.
Cap GroupFlow::carry(int sink, int start, Cap want, const std::vector<Cap>& supply) {
  Cap amount = std::min(want, supply[start] - used_[start]);
  for (int v = nextOfHub_[start]; v != sink && amount > 0;) {
    const int next = nextOfRank_[v];
    if (next >= 0) {
      amount = std::min(amount, residual(v, next));
      v = next;
    } else {
      const int j = -1 - next;
      amount = std::min(amount, hubFlow(j, v));
      v = nextOfHub_[j];
    }
  }
  if (amount <= 0) return 0;
  used_[start] += amount;
  if (used_[start] == supply[start]) supplied_[start / 64] &= ~(Word(1) << (start & 63));
  hubFlow(start, nextOfHub_[start]) += amount;
  for (int v = nextOfHub_[start]; v != sink;) {
    const int next = nextOfRank_[v];
    if (next >= 0) {
      pushRank(v, next, amount);
      v = next;
    } else {
      const int j = -1 - next;
      hubFlow(j, v) -= amount;
      v = nextOfHub_[j];
      hubFlow(j, v) += amount;
    }
  }
  return amount;
}

}  // namespace forestcc::graph
