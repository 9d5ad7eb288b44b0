#include "graph/maxflow.hpp"

#include <algorithm>

namespace forestcc::graph {

void MaxFlow::reset(int n) {
  n_ = n;
  source_ = -1;
  head_.assign(n, -1);
  next_.clear();
  to_.clear();
  residual_.clear();
}

int MaxFlow::addArc(int u, int v, Cap cap) {
  if (cap <= 0 || u == v) return -1;
  to_.push_back(v);
  residual_.push_back(cap);
  next_.push_back(head_[u]);
  head_[u] = static_cast<int>(to_.size()) - 1;
  to_.push_back(u);
  residual_.push_back(0);
  next_.push_back(head_[v]);
  head_[v] = static_cast<int>(to_.size()) - 1;
  return static_cast<int>(to_.size()) - 2;
}

bool MaxFlow::buildLevels(int source, int sink) {
  level_.assign(n_, -1);
  queue_.clear();
  queue_.push_back(source);
  level_[source] = 0;
  for (size_t qi = 0; qi < queue_.size(); ++qi) {
    int v = queue_[qi];
    for (int a = head_[v]; a >= 0; a = next_[a]) {
      if (residual_[a] > 0 && level_[to_[a]] < 0) {
        level_[to_[a]] = level_[v] + 1;
        queue_.push_back(to_[a]);
      }
    }
  }
  return level_[sink] >= 0;
}

// Depth-first blocking-flow step: pushes up to `want` along level-increasing arcs, several paths
// per call; cursor_ makes each dead-end arc cost O(1) per phase.
Cap MaxFlow::push(int v, int sink, Cap want) {
  if (v == sink) return want;
  Cap pushed = 0;
  for (int& a = cursor_[v]; a >= 0; a = next_[a]) {
    int w = to_[a];
    if (residual_[a] <= 0 || level_[w] != level_[v] + 1) continue;
    Cap got = push(w, sink, std::min(want - pushed, residual_[a]));
    if (got > 0) {
      residual_[a] -= got;
      residual_[a ^ 1] += got;
      pushed += got;
      if (pushed == want) return pushed;  // keep the cursor: this arc may have room left
    }
  }
  level_[v] = -1;  // dead end for the rest of this phase
  return pushed;
}

Cap MaxFlow::run(int source, int sink, Cap limit) {
  source_ = source;
  Cap flow = 0;
  while (flow < limit && buildLevels(source, sink)) {
    cursor_ = head_;
    flow += push(source, sink, limit - flow);
  }
  return flow;
}

void MaxFlow::save(Saved& into) const {
  into.arcs = to_.size();
  into.residual.assign(residual_.begin(), residual_.end());
}

void MaxFlow::restore(const Saved& saved) {
  // Arcs were pushed in twin pairs at the heads of their lists; pop them in reverse order.
  while (to_.size() > saved.arcs) {
    const int back = static_cast<int>(to_.size()) - 1;  // v -> u twin of the forward arc u -> v
    const int u = to_[back], v = to_[back - 1];
    head_[v] = next_[back];
    head_[u] = next_[back - 1];
    to_.resize(back - 1);
    next_.resize(back - 1);
  }
  residual_.assign(saved.residual.begin(), saved.residual.end());
}

std::vector<char> MaxFlow::sourceSide() const {
  std::vector<char> seen(n_, 0);
  std::vector<int> stack{source_};
  seen[source_] = 1;
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    for (int a = head_[v]; a >= 0; a = next_[a]) {
      if (residual_[a] > 0 && !seen[to_[a]]) {
        seen[to_[a]] = 1;
        stack.push_back(to_[a]);
      }
    }
  }
  return seen;
}

}  // namespace forestcc::graph
