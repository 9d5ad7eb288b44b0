// The directed capacitated graph the generators work on: compute and switch nodes, integer arc
// capacities (bandwidths scaled to a common unit by the Python side), parallel arcs merged.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
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
  // Of those, the ones switch removal and packing ran (the rest: the exact cut bound and the
  // check of the capacities scaled for k trees, capacitiesForTrees, at least N + 1 max-flows).
  long long maxflowsSplit = 0, maxflowsPack = 0;
  long long switchesBatched = 0;   // switches isolated by one checked plan (switch_removal.cpp)
  long long switchesPairwise = 0;  // switches isolated pair by pair (the plan did not hold)
  long long arcsByBatch = 0;       // tree arcs admitted in node-by-node batches (tree_packing.cpp)
  long long batchesRefused = 0;    // node-by-node batches whose check failed as a whole
  long long shallowingChanges = 0;  // parent trades and moves the shallowing pass made
  // Processor and wall seconds per step of the generic path (on a shared machine the wall seconds
  // say little); capacitiesForTrees is in neither the bound's nor any other step's.
  double cpuSecondsBound = 0, cpuSecondsSplit = 0, cpuSecondsPack = 0, cpuSecondsShallow = 0,
         cpuSecondsPaths = 0;
  double secondsBound = 0, secondsSplit = 0, secondsPack = 0, secondsShallow = 0,
         secondsPaths = 0;
};
Stats& stats();

// Adds one step's wall and processor seconds (and, given a counter, the max-flows it ran) to
// stats() when the scope ends: the one place the steps of the generic path are timed.
class StepTimer {
 public:
  StepTimer(double& wall, double& cpu, long long* maxflows = nullptr)
      : wall_(wall), cpu_(cpu), maxflows_(maxflows), start_(std::chrono::steady_clock::now()),
        clock_(std::clock()), flows_(stats().maxflows) {}
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;
  ~StepTimer() {
    if (maxflows_) *maxflows_ += stats().maxflows - flows_;
    cpu_ += static_cast<double>(std::clock() - clock_) / CLOCKS_PER_SEC;
    wall_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& wall_;
  double& cpu_;
  long long* maxflows_;
  std::chrono::steady_clock::time_point start_;
  std::clock_t clock_;
  long long flows_;
};

}  // namespace forestcc::graph
