// The forest as arrays and its segments (tree_segments.hpp): the Forest's checks and tables, and
// tree_plan._runs / _segments over them.
#include "plan/tree_segments.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace forestcc::plan::trees {

Forest::Forest(const std::vector<TreeInput>& trees, int nranks, int64_t k, size_t routeCount)
    : trees_(trees), n_(nranks) {
  if (nranks < 1) throw std::invalid_argument("tree plan: nranks must be at least 1");
  std::vector<char> reached(n_);
  for (size_t t = 0; t < trees.size(); ++t) {
    const TreeInput& tree = trees[t];
    const std::string where = "tree plan: tree " + std::to_string(t) + ": ";
    if (tree.root < 0 || tree.root >= nranks) throw std::invalid_argument(where + "root " + std::to_string(tree.root) + " outside 0.." + std::to_string(nranks - 1));
    if (tree.count < 1 || tree.first < 0 || tree.first + tree.count > k) {
      throw std::invalid_argument(where + "chunks " + std::to_string(tree.first) + ".." +
                                  std::to_string(tree.first + tree.count - 1) + " outside 0.." + std::to_string(k - 1));
    }
    std::fill(reached.begin(), reached.end(), 0);
    reached[tree.root] = 1;
    for (const auto& [p, c] : tree.arcs) {
      if (p < 0 || p >= nranks || c < 0 || c >= nranks || !reached[p] || reached[c]) {
        throw std::invalid_argument(where + "arc " + std::to_string(p) + "->" + std::to_string(c) + " out of order");
      }
      reached[c] = 1;
    }
    for (int route : tree.routes) {
      if (route < -1 || route >= int64_t(routeCount)) throw std::invalid_argument(where + "unknown route id " + std::to_string(route));
    }
  }
  const size_t count = trees.size();
  parent_.assign(count * n_, -1);
  routeIn_.assign(count * n_, -1);
  kidsBegin_.assign(count * (n_ + 1), 0);
  kids_.resize(count);
  for (size_t t = 0; t < count; ++t) {
    const TreeInput& tree = trees[t];
    int* begin = &kidsBegin_[t * (n_ + 1)];
    for (const auto& [p, c] : tree.arcs) ++begin[p + 1];
    for (size_t v = 0; v < n_; ++v) begin[v + 1] += begin[v];
    std::vector<int> fill(begin, begin + n_);
    kids_[t].resize(tree.arcs.size());
    for (size_t i = 0; i < tree.arcs.size(); ++i) {
      const auto [p, c] = tree.arcs[i];
      parent_[t * n_ + c] = p;
      routeIn_[t * n_ + c] = tree.routes.empty() ? -1 : tree.routes[i];
      kids_[t][fill[p]++] = c;
    }
  }
}

namespace {

struct Run {
  int t0, t1, route;
};

// tree_plan._runs: maximal runs of consecutive trees among `ids` where `child` is a child of
// `node`, with the same route and adjacent chunks.
std::vector<Run> runs(const Forest& f, const std::vector<int>& ids, int node, int child) {
  std::vector<Run> out;
  for (int t : ids) {
    if (!f.isChild(t, node, child)) continue;
    const int route = f.routeTo(t, child);
    if (!out.empty()) {
      Run& last = out.back();
      const TreeInput& prev = f.tree(last.t1 - 1);
      if (last.t1 == t && last.route == route && prev.first + prev.count == f.tree(t).first) {
        last.t1 = t + 1;
        continue;
      }
    }
    out.push_back({t, t + 1, route});
  }
  return out;
}

}  // namespace

// tree_plan._segments: root segments per root, built outwards (parents first).
std::vector<Segment> buildSegments(const Forest& f, size_t treeCount, int nranks,
                                   const std::vector<int>& reverseRoute) {
  std::vector<Segment> out;
  std::vector<int> rootOrder;
  std::vector<std::vector<int>> byRoot(nranks);
  for (size_t t = 0; t < treeCount; ++t) {
    const int root = f.tree(int(t)).root;
    if (byRoot[root].empty()) rootOrder.push_back(root);
    byRoot[root].push_back(int(t));
  }
  std::vector<int> seen(nranks, -1);
  int stamp = 0;
  // The children of `node` in the trees `ids`, in order of first appearance.
  auto firstSeen = [&](const std::vector<int>& ids, int node) {
    std::vector<int> order;
    ++stamp;
    for (int t : ids) {
      f.forChildren(t, node, [&](int c) {
        if (seen[c] != stamp) {
          seen[c] = stamp;
          order.push_back(c);
        }
      });
    }
    return order;
  };
  auto make = [&](int sender, int receiver, const Run& run, int parent) {
    Segment s;
    s.sender = sender;
    s.receiver = receiver;
    s.t0 = run.t0;
    s.t1 = run.t1;
    s.route = run.route;
    s.back = run.route < 0 ? -1 : reverseRoute.at(run.route);
    s.parent = parent;
    s.depth = parent < 0 ? 1 : out[parent].depth + 1;
    s.lo = f.tree(run.t0).first;
    s.hi = f.tree(run.t1 - 1).first + f.tree(run.t1 - 1).count;
    out.push_back(std::move(s));
    const int id = int(out.size()) - 1;
    if (parent >= 0) out[parent].children.push_back(id);
    return id;
  };
  std::vector<int> frontier;
  for (int root : rootOrder) {
    for (int c : firstSeen(byRoot[root], root)) {
      for (const Run& run : runs(f, byRoot[root], root, c)) frontier.push_back(make(root, c, run, -1));
    }
  }
  std::vector<int> ids;
  while (!frontier.empty()) {
    std::vector<int> next;
    for (int s : frontier) {
      const int x = out[s].receiver;
      ids.clear();
      for (int t = out[s].t0; t < out[s].t1; ++t) ids.push_back(t);
      for (int c : firstSeen(ids, x)) {
        for (const Run& run : runs(f, ids, x, c)) next.push_back(make(x, c, run, s));
      }
    }
    frontier = std::move(next);
  }
  return out;
}

}  // namespace forestcc::plan::trees
