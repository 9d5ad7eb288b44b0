// Switch removal by edge splitting (ForestColl step 2).
//
// Switches forward but do not replicate, so trees are packed on a switch-free graph whose arcs
// (u, t) stand for routes u -> w -> t through switches. At a switch w we repeatedly move an amount
// c from the pair (u, w), (w, t) to a direct arc (u, t), choosing c as large as Edmonds' condition
// "every compute node receives N·k from the super source" allows, until w is isolated. Every
// arc remembers which physical paths its capacity runs on, so trees map back to the hardware.
#pragma once

#include <vector>

#include "graph/network.hpp"

namespace forestcc::graph {

struct PathPiece {
  int path;    // index into SwitchFreeGraph::paths
  Cap amount;  // capacity units running on that path
};

struct SwitchFreeGraph {
  int count = 0;                      // N compute nodes, indexed 0..N-1 here
  std::vector<int> nodes;             // compute index -> network node index
  std::vector<Cap> cap;               // N*N capacities of the logical arcs
  std::vector<std::vector<PathPiece>> pieces;  // N*N: how each logical arc is routed
  std::vector<std::vector<int>> paths;         // physical node paths (network node indices)

  Cap at(int u, int v) const { return cap[static_cast<size_t>(u) * count + v]; }
};

// caps: integer capacities per net.arcs entry (U·bandwidth); k: trees per root. The caller must have
// checked Edmonds' condition for (caps, k); the result satisfies it too. batched: first try to
// isolate each switch by one whole plan checked with min(in, out) max-flows (switch_removal.cpp,
// isolateAtOnce); false goes pair by pair from the start, two max-flows per split.
SwitchFreeGraph removeSwitches(const Network& net, const std::vector<Cap>& caps, Cap k,
                               bool batched = true);

}  // namespace forestcc::graph
