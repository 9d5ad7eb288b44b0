// Max-flow (Dinic) with exact int64 capacities, for the schedule generators in this folder.
//
// Why a native max-flow: ForestColl's generator runs thousands of max-flows per topology; a pure
// Python one costs tens of milliseconds each, and scipy's wraps capacities at 2^31. Capacities here
// are exact integers (bandwidths scaled to a common unit), so cut values compare without epsilon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace forestcc::graph {

using Cap = std::int64_t;
// "Unbounded" capacity. Flows stop at their limit (checked to be below 2^58), so no sum overflows.
constexpr Cap kInfiniteCap = Cap(1) << 61;

class MaxFlow {
 public:
  // Starts a fresh network of n nodes (reusing the buffers of the previous one).
  void reset(int n);
  // Adds u -> v with capacity cap and its residual twin; arcs with cap <= 0 are skipped (-1).
  // Returns the arc's index, for flowOn.
  int addArc(int u, int v, Cap cap);
  // The flow on an arc added as `arc` (its twin's residual).
  Cap flowOn(int arc) const { return residual_[arc ^ 1]; }
  // Pushes flow from source to sink until it reaches `limit` or no augmenting path is left;
  // returns the flow pushed by this call (== limit when the limit was reached). A later call on
  // the same source adds to the flow already there (incremental use, see save()).
  Cap run(int source, int sink, Cap limit = kInfiniteCap);

  // Incremental flows: save() remembers the residual network; restore() undoes the arcs added
  // and the flow pushed since. Asking "how much more flow reaches this extra sink?" for many
  // sinks then costs one augmentation each instead of a max-flow from scratch.
  struct Saved {
    std::size_t arcs = 0;
    std::vector<Cap> residual;
  };
  void save(Saved& into) const;
  void restore(const Saved& saved);
  // After run() stopped below its limit: the source side of a minimum cut (residual reachability
  // from the source), as a 0/1 vector over nodes.
  std::vector<char> sourceSide() const;
  int nodeCount() const { return n_; }

 private:
  bool buildLevels(int source, int sink);
  Cap push(int v, int sink, Cap want);

  int n_ = 0;
  int source_ = -1;
  std::vector<int> head_, next_, to_;
  std::vector<Cap> residual_;
  std::vector<int> level_, cursor_, queue_;
};

}  // namespace forestcc::graph
