// Max-flow into one sink from groups of source nodes, with the groups' hubs left implicit (for the
// node-by-node tree packing, tree_packing.cpp).
//
// The packing's feasibility check is a max-flow from a source s that feeds each incomplete tree
// group j its multiplicity m_j through a hub arc onto every member of j's partial tree. Built as
// arcs, mid-way through a 1,024-rank packing that is up to N²/2 hub arcs per check, and most of
// them carry nothing: the flow usually enters y straight from one of its in-neighbours. Here a
// hub is a bit per (rank, group) that the caller keeps anyway, and the search runs backwards from
// the sink, so it touches only the ranks near y until the demand is met:
//   * first, straight paths s -> hub j -> x -> y for every in-neighbour x of y (a transportation
//     step over bitset words);
//   * then shortest augmenting paths found by a breadth-first search backwards from y through the
//     residual graph (rank arcs, hub -> member arcs, and member -> hub arcs where a hub's flow can
//     be moved to another member), stopped once the hubs with supply left that it reached could
//     meet the demand; the flow then goes along the search tree's path from each of them in turn
//     (as long as every arc on it still has room), several paths per search.
// Exact: it is Ford-Fulkerson with shortest paths (Edmonds-Karp) on the same network the hub arcs
// would build, started from a feasible flow; tests/test_graph_group_flow.py compares it with
// MaxFlow on random networks.
#pragma once

#include <utility>
#include <vector>

#include "graph/maxflow.hpp"

namespace forestcc::graph {

using Word = unsigned long long;

class GroupFlow {
 public:
  // n ranks; capIn is an n*n matrix of arc capacities by head, capIn[v*n + u] the capacity of
  // u -> v (the search reads a rank's in-arcs, so they lie together), read at each run: its values
  // may change between runs, but an arc with capacity must be among `neighbours` (for each rank,
  // every rank it has an arc to or from).
  void setGraph(int n, const std::vector<Cap>* capIn, std::vector<std::vector<int>> neighbours);

  // The maximum flow into `sink`, stopped at `limit`, where group j (a bit of `active`) supplies
  // supply[j] and may enter the network at any rank v whose memberOf[v] has bit j. Groups that
  // hold the sink must not be active (their flow would need no arc).
  Cap run(int sink, const std::vector<Word>& active, const std::vector<Cap>& supply,
          const std::vector<std::vector<Word>>& memberOf, Cap limit);

 private:
  Cap residual(int u, int v) const {  // flow_ is antisymmetric: -flow(u, v) is flow_[v*n + u]
    const size_t a = static_cast<size_t>(v) * n_ + u;
    return (*capIn_)[a] + flow_[a];
  }
  void pushRank(int u, int v, Cap amount);
  Cap& hubFlow(int j, int v);  // flow on hub j -> rank v (an entry is created when missing)
  Cap augment(int sink, Cap want, const std::vector<Word>& active, const std::vector<Cap>& supply,
              const std::vector<std::vector<Word>>& memberOf);
  Cap carry(int sink, int start, Cap want, const std::vector<Cap>& supply);
  void clear();

  int n_ = 0;
  const std::vector<Cap>* capIn_ = nullptr;
  std::vector<std::vector<int>> neighbours_;
  std::vector<Cap> flow_;  // n*n net flow, antisymmetric; only touched_ entries are non-zero
  std::vector<size_t> touched_;
  std::vector<Cap> used_;                                // per group: supply used this run
  std::vector<std::vector<std::pair<int, Cap>>> hubOut_;  // per group: (rank, flow) from its hub
  std::vector<int> hubsUsed_;
  std::vector<Word> supplied_;  // active groups with supply left
  std::vector<Word> hubSeen_;   // per search: hubs reached
  std::vector<int> rankSeen_;   // per search: stamp of the search that reached the rank
  int stamp_ = 0;
  std::vector<int> nextOfRank_;  // per search: the next node towards the sink (>= 0 a rank,
                                 // < 0 the hub -1 - j)
  std::vector<int> nextOfHub_;   // per search: the rank a hub's path continues to
  std::vector<int> queue_;       // per search: ranks (>= 0) and hubs (< 0, as above)
  std::vector<int> starts_;      // per search: hubs with supply left that it reached, nearest first
};

}  // namespace forestcc::graph
