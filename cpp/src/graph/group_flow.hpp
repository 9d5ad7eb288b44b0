// Max-flow into one sink from groups of source nodes, with the groups' hubs left implicit (for the
// node-by-node tree packing, tree_packing.cpp).
//
// The packing's feasibility check is a max-flow from a source s that feeds each incomplete tree
// group j its multiplicity m_j through a hub arc onto every member of j's partial tree. Built as
// arcs, mid-way through a 1,024-rank packing that is up to N²/2 hub arcs per check, rebuilt for
// every check. Here the hubs are bitsets the caller keeps anyway (per rank, the groups holding it;
// per group, its ranks) and the flow state is reset by what it touched:
//   * first, straight paths s -> hub j -> x -> y for every in-neighbour x of the sink y (a
//     transportation step over bitset words: on the fat trees most of the demand);
//   * then Dinic's phases: a breadth-first search backwards from y gives each rank and hub its
//     distance to y in the residual graph (rank arcs; hub -> member arcs, unbounded; member -> hub
//     arcs where the hub's flow into that member can move to another member), stopped at the
//     nearest hubs with supply left; a depth-first blocking flow from those hubs follows arcs one
//     step nearer y, finding a hub's next members by a word-wise AND of its ranks with the ranks
//     at that distance.
// Exact: Dinic's algorithm on the network the hub arcs would build, started from a feasible flow;
// tests/test_graph_group_flow.py compares it with MaxFlow on random networks.
#pragma once

#include <utility>
#include <vector>

#include "graph/maxflow.hpp"

namespace forestcc::graph {

using Word = unsigned long long;

class GroupFlow {
 public:
  // n ranks; capIn is an n*n matrix of arc capacities by head, capIn[v*n + u] the capacity of
  // u -> v, copied here; `neighbours` lists, for each rank, every rank it has an arc to or from.
  void setGraph(int n, const std::vector<Cap>& capIn, const std::vector<std::vector<int>>& neighbours);
  // Adds delta to the capacity of u -> v (the caller's capacities change between runs; the pair
  // must be neighbours).
  void changeCapacity(int u, int v, Cap delta);
  // Forgets the neighbours joined by no capacity either way any more (the caller's capacities
  // only shrink: such a pair can carry no flow again). The search's cost is the arcs it looks at,
  // and packing uses up most of them.
  void dropEmptyArcs();

  // The maximum flow into `sink`, stopped at `limit`, where group j (a bit of `active`) supplies
  // supply[j] and may enter the network at any of its ranks: memberOf[v] has bit j, and
  // members[j] (a bitset over ranks) has bit v. Groups that hold the sink must not be active, nor
  // groups without supply (supply[j] <= 0: they would count as reached in sourceSide).
  // extraRank >= 0 adds one more source: extraSupply entering at that rank alone. When the flow
  // stays below the limit and sourceSide is given, it receives the ranks the source reaches in
  // the residual network (with extraRank, as if its source arc were unbounded): the source side
  // of the minimum cut nearest the source among those that hold extraRank. When no minimum cut
  // holds it (extraSupply is what binds), that side holds the sink too; tree packing never meets
  // this: its states keep Lovász's condition, so a cut with extraRank on its sink side is never
  // below the limit.
  Cap run(int sink, const std::vector<Word>& active, const std::vector<Cap>& supply,
          const std::vector<std::vector<Word>>& memberOf,
          const std::vector<const std::vector<Word>*>& members, Cap limit, int extraRank = -1,
          Cap extraSupply = 0, std::vector<char>* sourceSide = nullptr);

 private:
  // One entry per ordered pair of neighbours, in the rank's range of links_ (sorted by `to`):
  // both directions' capacities and this run's net flow, mirrored in the other rank's entry, so
  // that a search over a rank's arcs reads one array in order (the n*n matrices it read before
  // missed the cache on every arc at 2,048 ranks and more).
  struct Link {
    int to;      // the neighbour
    int mirror;  // index of the neighbour's entry for this rank
    Cap out;     // capacity of this rank -> to
    Cap in;      // capacity of to -> this rank
    Cap flow;    // this run's net flow this rank -> to (the mirror holds its negation)
  };
  Cap outRoom(const Link& l) const { return l.out - l.flow; }  // residual this rank -> to
  Cap inRoom(const Link& l) const { return l.in + l.flow; }    // residual to -> this rank
  int linkOf(int u, int v) const;  // index of u's entry for v
  void buildLinks(const std::vector<std::vector<int>>& neighbours,
                  const std::vector<std::vector<Cap>>& outCaps,
                  const std::vector<std::vector<Cap>>& inCaps);
  void pushLink(size_t link, Cap amount);  // amount along the link's rank -> to
  Cap& hubFlow(int j, int v);  // flow on hub j -> rank v (an entry is created when missing)
  bool isActive(int j) const { return (active_[j / 64] >> (j % 64)) & 1; }
  void label(int j, int d);
  bool levels(int sink, const std::vector<std::vector<Word>>& memberOf);
  void reachFromSource(std::vector<char>& side);
  Cap pushFromHub(int j, Cap want, int sink);
  Cap pushFromRank(int v, Cap want, int sink);
  void clear();

  int n_ = 0;
  std::vector<Link> links_;
  std::vector<size_t> first_;  // rank v's links are [first_[v], first_[v + 1])
  std::vector<size_t> touched_;  // links carrying flow this run (one of each mirrored pair)
  std::vector<Cap> used_;                                // per group: supply used this run
  std::vector<std::vector<std::pair<int, Cap>>> hubOut_;  // per group: (rank, flow) from its hub
  std::vector<std::vector<int>> hubIn_;                   // per rank: groups with an entry above
  std::vector<int> hubsUsed_, ranksFed_;
  // This run's groups: the caller's, and the extra source as one more group (index extra_) whose
  // only member is extraRank_.
  std::vector<Word> active_, supplied_;  // supplied_: active groups with supply left
  std::vector<Cap> supply_;
  std::vector<const std::vector<Word>*> members_;
  std::vector<Word> extraMembers_;
  int extra_ = 0, extraRank_ = -1;
  // Per phase: distances to the sink (-1: unreached or a dead end), ranks by distance as bitsets,
  // the hubs the blocking flow starts at, and each node's position in its arc lists.
  std::vector<int> rankDist_, hubDist_;
  // Per phase: the active hubs not labelled yet. A rank's groups are ANDed with it, so that each
  // hub is visited once per search and not once per member the search reaches (on the torus, with
  // its k = 4 groups split to about 1,300, the search spent a fifth of its time re-finding hubs).
  std::vector<Word> unlabelled_;
  // Its words that are not zero yet, a bit each: most hubs are labelled after the first ranks of
  // the search, and the rest of it then skips their words (at 4,096 ranks a rank's groups span
  // 64 words or more, more than its arcs).
  std::vector<Word> unlabelledWords_;
  std::vector<std::vector<Word>> ranksAt_;
  std::vector<int> starts_, queue_;
  std::vector<size_t> rankCursor_, hubCursor_;
};

}  // namespace forestcc::graph
