// The tree compiler's view of a forest (tree_compiler.cpp): the trees as arrays (parent, incoming
// route and children of every rank per tree) and the segments cut from them, the puts every later
// step of the compiler is made of (tree_plan._Segment, _runs, _segments). Apart from the compiler
// because they are a pure function of the trees: no workers, channels or ops here.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/tree_compiler.hpp"

namespace forestcc::plan::trees {

// Consecutive trees [t0, t1) crossing sender -> receiver as one put (tree_plan._Segment).
struct Segment {
  int sender, receiver, t0, t1, route, back, parent, depth;
  int64_t lo, hi;
  std::vector<int> children;
};

// The trees as arrays: parent and incoming route of every rank, children in arc order.
class Forest {
 public:
  // Checks what the arrays below rely on (tree_plan._check_tiling checks the rest before this
  // is called): ranks in range, parents reached before their children, route ids known, chunks
  // inside 0..k-1.
  Forest(const std::vector<TreeInput>& trees, int nranks, int64_t k, size_t routeCount);
  bool isChild(int t, int node, int child) const { return parent_[size_t(t) * n_ + child] == node; }
  int routeTo(int t, int child) const { return routeIn_[size_t(t) * n_ + child]; }
  template <class F>
  void forChildren(int t, int node, F&& f) const {
    const int* begin = &kidsBegin_[size_t(t) * (n_ + 1)];
    for (int i = begin[node]; i < begin[node + 1]; ++i) f(kids_[t][i]);
  }
  const TreeInput& tree(int t) const { return trees_[t]; }

 private:
  const std::vector<TreeInput>& trees_;
  size_t n_;
  std::vector<int> parent_, routeIn_, kidsBegin_;
  std::vector<std::vector<int>> kids_;
};

// tree_plan._segments: root segments per root, built outwards (parents first).
std::vector<Segment> buildSegments(const Forest& f, size_t treeCount, int nranks,
                                   const std::vector<int>& reverseRoute);

}  // namespace forestcc::plan::trees
