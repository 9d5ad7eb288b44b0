// Binomial trees for the rooted collectives: ceil(log2 N) steps. Relative rank v = (r - root)
// mod N; the children of v are v + 2^j for every 2^j below v's lowest set bit (all 2^j < N at
// the root), its parent is v with the lowest set bit cleared, and its subtree is the relative
// ranks [v, v + lowbit(v)) (the root's: all of them). Children are served largest subtree first.
//
// Per rank (n as in gen_ring.cpp):
//   broadcast  a rank sends n to each child: the root ceil(log2 N) n
//   reduce     a rank receives n from each child into a scratch slot per level
//              (ceil(log2 N) n of scratch), reduces and sends n to its parent
//   gather     a rank sends its subtree's blocks (up to n/2) to its parent; no scratch
//   scatter    the root sends each child its subtree's blocks; inner ranks stage their
//              subtree's blocks in scratch (up to N/2 - 1 blocks)
#include "collectives/generators/common.hpp"

#include <tuple>

#include "forestcc/error.hpp"

namespace forestcc::collectives::gen {

namespace {

constexpr const char* kName = "tree";
const PlanBuilder::BuildOptions kPipelined{0, -1, 8, 256 << 10};

struct Tree {
  explicit Tree(PlanBuilder& b) : n(b.nranks()), root(b.root()), up(n, -1), down(n, -1) {
    for (int v = 1; v < n; ++v) std::tie(down[v], up[v]) = b.channelPair(rank(parent(v)), rank(v));
  }
  int rank(int v) const { return (v + root) % n; }
  static int lowbit(int v) { return v & -v; }
  static int parent(int v) { return v & (v - 1); }
  int size(int v) const { return v == 0 ? n : std::min(lowbit(v), n - v); }
  // Children of v, largest subtree first.
  std::vector<int> children(int v) const {
    std::vector<int> out;
    const int limit = v == 0 ? n : lowbit(v);
    int top = 1;
    while (top * 2 < limit) top *= 2;
    for (int d = top; d >= 1; d /= 2)
      if (d < limit && v + d < n) out.push_back(v + d);
    return out;
  }
  // Level of child c under its parent: c = parent + 2^level.
  static int level(int c) {
    int l = 0;
    while ((1 << l) != lowbit(c)) ++l;
    return l;
  }

  int n, root;
  std::vector<int> up;    // by v: v's channel to its parent
  std::vector<int> down;  // by v: the parent's channel to v
};

plan::Plan broadcast(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Tree tree(b);
  for (int v = 0; v < req.nranks; ++v) {
    const int r = tree.rank(v), w = b.worker(r);
    if (v > 0) {
      b.signal(r, w, tree.up[v]);
      b.wait(r, w, tree.up[v]);
    }
    for (int c : tree.children(v)) {
      b.wait(r, w, tree.down[c]);
      b.putSignal(r, w, tree.down[c], v == 0 ? in(0) : out(0), out(0));
    }
    if (v == 0 && !req.inPlace) b.copy(r, w, in(0), out(0));
  }
  return finishPlan(b, kName, kPipelined);
}

// Each child puts its partial sum into the parent's scratch slot for its level; the parent adds
// them to its input (into its output: unspecified on non-roots) and passes the sum up.
plan::Plan reduce(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Tree tree(b);
  for (int v = 0; v < req.nranks; ++v) {
    const int r = tree.rank(v), w = b.worker(r);
    const std::vector<int> children = tree.children(v);
    for (int c : children) b.signal(r, w, tree.down[c]);
    std::vector<Ref> srcs{req.inPlace ? out(0) : in(0)};
    for (int c : children) {
      b.wait(r, w, tree.down[c]);
      srcs.push_back(scr(uint32_t(Tree::level(c))));
    }
    const Ref slot = scr(uint32_t(v > 0 ? Tree::level(v) : 0));
    if (v == 0) {
      b.reduce(r, w, out(0), srcs);
    } else {
      b.wait(r, w, tree.up[v]);
      if (children.empty()) b.put(r, w, tree.up[v], srcs[0], slot);
      else b.reducePut(r, w, tree.up[v], out(0), srcs, slot);
      b.signal(r, w, tree.up[v]);
    }
  }
  return finishPlan(b, kName, kPipelined);
}

// Blocks of the relative ranks [v, v + count) sit at absolute blocks (v + root) mod N onwards.
void putBlocks(PlanBuilder& b, const Tree& tree, int r, int w, int ch, plan::Buffer buffer, int v, int count) {
  const int first = tree.rank(v), head = std::min(count, tree.n - first);
  b.put(r, w, ch, {buffer, uint32_t(first)}, out(uint32_t(first)), uint32_t(head));
  if (count > head) b.put(r, w, ch, {buffer, 0}, out(0), uint32_t(count - head));
}

// Each rank collects its subtree's blocks in its output (unspecified on non-roots) and puts them
// into its parent's output at their final places.
plan::Plan gather(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Tree tree(b);
  for (int v = 0; v < req.nranks; ++v) {
    const int r = tree.rank(v), w = b.worker(r);
    const std::vector<int> children = tree.children(v);
    for (int c : children) b.signal(r, w, tree.down[c]);
    if (!req.inPlace && (v == 0 || !children.empty())) b.copy(r, w, in(0), out(uint32_t(r)));
    for (int c : children) b.wait(r, w, tree.down[c]);
    if (v == 0) continue;
    b.wait(r, w, tree.up[v]);
    if (children.empty()) b.put(r, w, tree.up[v], in(0), out(uint32_t(r)));
    else putBlocks(b, tree, r, w, tree.up[v], plan::Buffer::Output, v, tree.size(v));
    b.signal(r, w, tree.up[v]);
  }
  return finishPlan(b, kName);
}

// The root puts each child's own block into its output and the rest of its subtree into its
// scratch (relative order after the child); inner ranks pass sub-subtrees on from scratch.
plan::Plan scatter(const GenerateRequest& req) {
  PlanBuilder b = startPlan(kName, req);
  Tree tree(b);
  for (int v = 0; v < req.nranks; ++v) {
    const int r = tree.rank(v), w = b.worker(r);
    if (v > 0) {
      b.signal(r, w, tree.up[v]);
      b.wait(r, w, tree.up[v]);
    } else if (!req.inPlace) {
      b.copy(r, w, in(uint32_t(r)), out(0));
    }
    for (int c : tree.children(v)) {
      const int ch = tree.down[c], rest = tree.size(c) - 1;
      b.wait(r, w, ch);
      if (v == 0) {
        b.put(r, w, ch, in(uint32_t(tree.rank(c))), out(0));
        if (rest > 0) {
          // the root's blocks of relative ranks c+1 .. c+rest, possibly wrapping around N
          const int first = tree.rank(c + 1), head = std::min(rest, tree.n - first);
          b.put(r, w, ch, in(uint32_t(first)), scr(0), uint32_t(head));
          if (rest > head) b.put(r, w, ch, in(0), scr(uint32_t(head)), uint32_t(rest - head));
        }
      } else {
        b.put(r, w, ch, scr(uint32_t(c - v - 1)), out(0));
        if (rest > 0) b.put(r, w, ch, scr(uint32_t(c - v)), scr(0), uint32_t(rest));
      }
      b.signal(r, w, ch);
    }
  }
  return finishPlan(b, kName);
}

plan::Plan generateTree(const GenerateRequest& req) {
  using C = plan::Collective;
  if (req.nranks == 1) return singleRankPlan(kName, req);
  switch (req.collective) {
    case C::Broadcast: return broadcast(req);
    case C::Reduce: return reduce(req);
    case C::Gather: return gather(req);
    case C::Scatter: return scatter(req);
    default: break;
  }
  throw Error(ErrorCode::Internal, "tree: no generator for " + std::string(plan::name(req.collective)));
}

}  // namespace

const Algorithm& treeAlgorithm() {
  using C = plan::Collective;
  static const Algorithm algorithm{kName, "binomial tree: ceil(log2 N) steps (rooted collectives)",
                                   {C::Broadcast, C::Reduce, C::Gather, C::Scatter}, generateTree};
  return algorithm;
}

}  // namespace forestcc::collectives::gen
