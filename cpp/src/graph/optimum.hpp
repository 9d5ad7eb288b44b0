// The exact throughput optimum of a topology (ForestColl's cut bound) and the capacities that
// realise it for a given number k of trees per root.
//
// For a cut S (a node set that leaves at least one compute node outside), all_gather must push
// |S ∩ Vc| shards out of S through B+(S), the capacity leaving S. The optimum time per shard is
// max_S |S ∩ Vc| / B+(S); Edmonds' theorem (multi-root form) makes it achievable with trees.
#pragma once

#include <vector>

#include "graph/network.hpp"

namespace forestcc::graph {

struct CutBound {
  Ratio ratio;             // |S ∩ Vc| / B+(S), reduced, in the network's capacity units
  std::vector<char> side;  // S, as a 0/1 vector over nodes
};

// Maximum-ratio cut by Dinkelbach's iteration: each step solves, for every sink v, the min-cut
// problem min_S λ·B+(S) − |S ∩ Vc| with one max-flow; a negative value yields a cut of larger
// ratio. Sinks are first taken one per symmetry class (colour refinement), then every compute node
// is checked at the final λ, so the answer is exact whether or not the classes are true orbits.
CutBound maxRatioCut(const Network& net);

// Edmonds' condition for k out-trees per root within arc capacities `caps` (indexed like
// net.arcs): for every compute sink v, maxflow(s → v) ≥ N·k where s feeds each compute node with
// k. Returns true when it holds; otherwise stores a violating S (source side without s).
bool rootedConditionHolds(const Network& net, const std::vector<Cap>& caps, Cap k,
                          const std::vector<int>& sinks, std::vector<char>* violating);

// One compute node per colour class of a colour refinement (1-dimensional Weisfeiler-Leman) on
// kinds and capacities: nodes in different classes are never symmetric, nodes in one class usually
// are. Used only to order work; every answer is checked on all sinks.
std::vector<int> sinkRepresentatives(const Network& net);

// Integer capacities floor(U·cap(e)) for the smallest U at which k trees per root fit.
// With k a multiple of the optimum's natural k, U = k·ratio and nothing is rounded.
struct ScaledCapacities {
  Ratio u;                // U, in trees per capacity unit
  std::vector<Cap> caps;  // per net.arcs entry
};
ScaledCapacities capacitiesForTrees(const Network& net, const CutBound& optimum, Cap k);

// Smallest k for which U = k·ratio makes every U·cap(e) an integer.
Cap naturalTreeCount(const Network& net, const Ratio& ratio);

}  // namespace forestcc::graph
