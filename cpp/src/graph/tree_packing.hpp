// Packing k out-trees per root into a switch-free graph (ForestColl step 3), and mapping each
// tree's logical arcs back to physical paths.
//
// Lovász's constructive proof of Edmonds' branching theorem, with multiplicities: a group of m
// identical partial trees grows by one arc (x, y) at a time; how many of the m copies may take the
// arc is one max-flow (the smallest surplus ρ(X) − #{trees that still must enter X} over sets X the
// arc enters). When fewer than m may, the group splits. Sets found tight stay tight for good, so they
// are remembered and rule out later candidate arcs without another max-flow.
#pragma once

#include <utility>
#include <vector>

#include "graph/switch_removal.hpp"

namespace forestcc::graph {

struct LogicalTree {
  int root;                               // compute index
  Cap multiplicity;                       // copies of this tree among the root's k
  std::vector<std::pair<int, int>> arcs;  // (parent, child) compute indices, in growth order
};

// byNode: 1 grows the trees node by node (one max-flow attaches a rank to every tree that can take
// it), 0 arc by arc (one max-flow per tree arc), -1 picks node by node from 128 ranks on.
std::vector<LogicalTree> packTrees(const SwitchFreeGraph& graph, Cap k, int byNode = -1);

struct PhysicalTree {
  int root;  // network node index
  Cap multiplicity;
  std::vector<std::pair<int, int>> arcs;  // (parent, child) network node indices
  std::vector<int> paths;                 // per arc: index into SwitchFreeGraph::paths
};

// Gives every tree arc one physical path; a tree whose arc capacity runs on several paths is split
// into copies that differ only in routing.
std::vector<PhysicalTree> routeTrees(SwitchFreeGraph& graph, const std::vector<LogicalTree>& trees);

}  // namespace forestcc::graph
