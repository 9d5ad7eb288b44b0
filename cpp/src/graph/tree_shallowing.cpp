#include "graph/tree_shallowing.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace forestcc::graph {

namespace {

// One unit tree as a parent array, with what the trades read: depths, and subtree intervals of a
// depth-first numbering (u lies below v when tin[v] <= tin[u] < tin[v] + size[v]).
struct UnitTree {
  int root;
  std::vector<int> parent;  // -1 at the root
  std::vector<int> depth, tin, size, height;  // height: levels below the node

  // Depths, subtree sizes and heights, and the depth-first numbering, from the parent array.
  // scratch: buffers reused across calls (children in CSR form, the walk's stack).
  void renumber(std::vector<int>& first, std::vector<int>& kids, std::vector<int>& stack) {
    const int n = static_cast<int>(parent.size());
    first.assign(n + 1, 0);
    for (int v = 0; v < n; ++v)
      if (parent[v] >= 0) ++first[parent[v] + 1];
    for (int v = 0; v < n; ++v) first[v + 1] += first[v];
    kids.resize(n);
    std::vector<int>& fill = stack;  // used as per-node insertion cursors first
    fill.assign(first.begin(), first.end() - 1);
    for (int v = 0; v < n; ++v)
      if (parent[v] >= 0) kids[fill[parent[v]]++] = v;
    depth.resize(n);
    tin.resize(n);
    size.assign(n, 1);
    height.assign(n, 0);
    // Pre-order numbering; a node's subtree is the range [tin, tin + size).
    std::vector<int>& order = stack;
    order.assign(1, root);
    depth[root] = 0;
    for (size_t i = 0; i < order.size(); ++i) {  // breadth-first: children after parents
      int v = order[i];
      for (int j = first[v]; j < first[v + 1]; ++j) {
        depth[kids[j]] = depth[v] + 1;
        order.push_back(kids[j]);
      }
    }
    for (size_t i = order.size(); i-- > 1;) {  // sizes and heights bottom-up
      int v = order[i], p = parent[v];
      size[p] += size[v];
      height[p] = std::max(height[p], height[v] + 1);
    }
    // tin: a parent's children take consecutive ranges after it, in CSR order.
    tin[root] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      int v = order[i], next = tin[v] + 1;
      for (int j = first[v]; j < first[v + 1]; ++j) {
        tin[kids[j]] = next;
        next += size[kids[j]];
      }
    }
  }

  bool below(int u, int v) const { return tin[v] <= tin[u] && tin[u] < tin[v] + size[v]; }
};

class Shallowing {
 public:
  Shallowing(const SwitchFreeGraph& g, const std::vector<LogicalTree>& trees, long long budget)
      : n_(g.count), spare_(g.cap), budget_(budget) {
    for (const LogicalTree& t : trees) {
      UnitTree unit{t.root, std::vector<int>(n_, -1), {}, {}, {}};
      for (auto [p, c] : t.arcs) {
        unit.parent[c] = p;
        spare_[static_cast<size_t>(p) * n_ + c] -= t.multiplicity;
      }
      unit.renumber(first_, kids_, stack_);
      for (Cap m = 0; m < t.multiplicity; ++m) units_.push_back(unit);
    }
  }

  std::vector<LogicalTree> run() {
    bool improved = true;
    while (improved && within()) {
      improved = false;
      for (int v = 0; v < n_ && within(); ++v) improved |= moveIntoSpare(v) | trade(v);
    }
    return merged();
  }

 private:
  bool within() const { return budget_ <= 0 || checks_ < budget_; }
  Cap& spare(int u, int v) { return spare_[static_cast<size_t>(u) * n_ + v]; }

  // Moves v, in each unit tree, under the shallowest parent whose arc into v has room left.
  bool moveIntoSpare(int v) {
    bool any = false;
    std::vector<int> room;
    for (int u = 0; u < n_; ++u)
      if (u != v && spare(u, v) > 0) room.push_back(u);
    if (room.empty()) return false;
    for (UnitTree& t : units_) {
      if (t.root == v) continue;
      int p = t.parent[v], best = -1;
      for (int u : room) {
        ++checks_;
        if (spare(u, v) > 0 && t.depth[u] < t.depth[best < 0 ? p : best] && !t.below(u, v)) best = u;
      }
      if (best < 0) continue;
      --spare(best, v);
      ++spare(p, v);
      t.parent[v] = best;
      t.renumber(first_, kids_, stack_);
      ++stats().shallowingChanges;
      any = true;
    }
    return any;
  }

  // Two unit trees entering v from different parents swap them when that lowers the deepest node
  // either reaches through v, or keeps it and lowers their summed depth: v's subtree moves by the
  // difference of the parents' depths in each tree. The deepest node comes first because a tree's
  // slowest path, not its average, decides when its last slice lands.
  bool trade(int v) {
    bool any = false;
    for (size_t a = 0; a < units_.size() && within(); ++a) {
      if (units_[a].root == v) continue;
      for (size_t b = a + 1; b < units_.size(); ++b) {
        UnitTree& A = units_[a];
        UnitTree& B = units_[b];
        if (B.root == v) continue;
        const int p = A.parent[v], q = B.parent[v];
        ++checks_;
        if (p == q) continue;
        // First the deepest node reached through v in either tree, then the summed depth.
        const int deepest = std::max(A.depth[p] + A.height[v], B.depth[q] + B.height[v]);
        const int deepestAfter = std::max(A.depth[q] + A.height[v], B.depth[p] + B.height[v]);
        long long gain = static_cast<long long>(A.size[v]) * (A.depth[p] - A.depth[q]) +
                         static_cast<long long>(B.size[v]) * (B.depth[q] - B.depth[p]);
        if (deepestAfter > deepest || (deepestAfter == deepest && gain <= 0)) continue;
        if (A.below(q, v) || B.below(p, v)) continue;
        A.parent[v] = q;
        B.parent[v] = p;
        A.renumber(first_, kids_, stack_);
        B.renumber(first_, kids_, stack_);
        ++stats().shallowingChanges;
        any = true;
      }
    }
    return any;
  }

  // Identical unit trees of a root become one tree again; arcs in breadth-first order (parents
  // before children, as the packing gave them).
  std::vector<LogicalTree> merged() const {
    std::map<std::pair<int, std::vector<int>>, size_t> index;
    std::vector<LogicalTree> out;
    for (const UnitTree& t : units_) {
      auto [it, fresh] = index.try_emplace({t.root, t.parent}, out.size());
      if (!fresh) {
        ++out[it->second].multiplicity;
        continue;
      }
      LogicalTree tree{t.root, 1, {}};
      std::vector<std::vector<int>> children(n_);
      for (int v = 0; v < n_; ++v)
        if (t.parent[v] >= 0) children[t.parent[v]].push_back(v);
      std::vector<int> queue{t.root};
      for (size_t i = 0; i < queue.size(); ++i)
        for (int c : children[queue[i]]) {
          tree.arcs.push_back({queue[i], c});
          queue.push_back(c);
        }
      out.push_back(std::move(tree));
    }
    return out;
  }

  int n_;
  std::vector<Cap> spare_;  // N*N: capacity the trees leave unused
  std::vector<UnitTree> units_;
  long long budget_, checks_ = 0;
  std::vector<int> first_, kids_, stack_;  // renumber()'s buffers
};

}  // namespace

std::vector<LogicalTree> shallowTrees(const SwitchFreeGraph& graph, const std::vector<LogicalTree>& trees,
                                      long long maxPairChecks) {
  StepTimer timer(stats().secondsShallow, stats().cpuSecondsShallow);
  return Shallowing(graph, trees, maxPairChecks).run();
}

}  // namespace forestcc::graph
