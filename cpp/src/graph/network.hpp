// The directed capacitated graph the generators work on: compute and switch nodes, integer arc
// capacities (bandwidths scaled to a common unit by the Python side), parallel arcs merged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/maxflow.hpp"

namespace forestcc::graph {

using Wide = __int128;

struct Arc {
  int src;
  int dst;
  Cap cap;
};

struct Network {
  int n = 0;
  std::vector<char> compute;  // 1 for a compute node (a rank), 0 for a switch
  std::vector<Arc> arcs;      // merged: at most one arc per (src, dst), cap > 0, no self-loops
  std::vector<int> computeNodes;  // node indices of compute nodes, ascending

  int computeCount() const { return static_cast<int>(computeNodes.size()); }
};

// Validates and merges parallel arcs (their capacities add up). Throws std::invalid_argument on bad
// input (index out of range, negative capacity) and when some compute node cannot reach another.
Network makeNetwork(int n, const std::vector<char>& compute, const std::vector<int>& src,
                    const std::vector<int>& dst, const std::vector<Cap>& cap);

// A reduced fraction num/den with den > 0.
struct Ratio {
  Cap num = 0;
  Cap den = 1;
};
Ratio reduced(Wide num, Wide den);
bool ratioLess(const Ratio& a, const Ratio& b);
Cap checkedCap(Wide value, const char* what);  // throws when value does not fit comfortably

// Counters reported back to Python so benchmarks can say where the time went.
struct Stats {
  long long maxflows = 0;
  // Of those, the ones each step ran (the rest: the exact cut bound).
  long long maxflowsSplit = 0, maxflowsPack = 0;
  long long switchesBatched = 0;   // switches isolated by one checked plan (switch_removal.cpp)
  long long switchesPairwise = 0;  // switches isolated pair by pair (the plan did not hold)
  long long arcsByBatch = 0;       // tree arcs admitted in node-by-node batches (tree_packing.cpp)
  long long shallowingChanges = 0;  // parent trades and moves the shallowing pass made
  // Processor seconds of the two steps that dominate the generic path (on a shared machine the
  // wall seconds above them say little).
  double cpuSecondsBound = 0, cpuSecondsSplit = 0, cpuSecondsPack = 0, cpuSecondsShallow = 0,
         cpuSecondsPaths = 0;
  double secondsBound = 0, secondsSplit = 0, secondsPack = 0, secondsShallow = 0,
         secondsPaths = 0;
};
Stats& stats();

}  // namespace forestcc::graph
