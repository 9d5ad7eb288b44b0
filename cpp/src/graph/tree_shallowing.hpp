// Making a packed forest shallower without changing what it asks of any arc.
//
// Every tree's node v has one parent. Two trees that enter v from different parents p and q may
// trade them (the first now enters v from q, the second from p): each arc still carries exactly the
// trees it carried, so capacities, routes and the forest's time are unchanged, and both stay
// spanning trees as long as neither new parent lies below v. A tree may also move v under a parent
// whose arc into v has capacity left over, and nearer its root. A trade is taken when it lowers
// the deepest node the two trees reach through v (or keeps it and lowers their summed depth).
// Deep trees cost time in a pipelined plan (every level forwards a slice only once it has fully
// arrived, on links the optimum keeps busy), which the packing's greedy growth does not look at.
#pragma once

#include <vector>

#include "graph/tree_packing.hpp"

namespace forestcc::graph {

// trees: a packing of `graph` (each tree's arcs fit the capacities together). Returns an equivalent
// packing (same roots, same k per root, every arc used by as many trees as before, or fewer where
// a move took spare capacity instead) with shallower trees. Trees of multiplicity m are traded as
// m unit trees, and identical unit trees of a root are merged again at the end. maxPairChecks
// bounds the work (0: no bound); the pass stops early there with every change so far kept.
std::vector<LogicalTree> shallowTrees(const SwitchFreeGraph& graph, const std::vector<LogicalTree>& trees,
                                      long long maxPairChecks);

}  // namespace forestcc::graph
