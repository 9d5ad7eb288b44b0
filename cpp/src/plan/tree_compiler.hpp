// Spanning trees -> per-rank programs: the op emission of python/forestcc/algorithms/tree_plan.py
// (segments, workers, channels, scratch slots, entry handshakes), in C++.
//
// A 1,024-rank forest all_reduce plan has 5 million ops; emitting them in Python took about 11 µs
// each. This is the same algorithm step for step (every worker, channel and op is made in the
// same order, so the plans are identical: tests/test_tree_compiler_native.py compiles forests both
// ways and compares). tree_plan.py stays the reference and documents the algorithm; the comments
// here say only what the C++ form adds. The trees are assumed valid (tree_plan._check_tiling runs
// first: every tree spans all ranks with parents before children, the chunks tile).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::plan {

struct TreeInput {
  int root = 0;
  int64_t first = 0;  // the tree carries chunks first .. first+count-1
  int64_t count = 1;
  std::vector<std::pair<int, int>> arcs;  // (parent, child), parents before children
  std::vector<int> routes;                // per arc: an interned route id, -1 none; empty: none
};

struct TreeCompileOptions {
  Collective collective = Collective::AllGather;  // all_gather, reduce_scatter or all_reduce
  int nranks = 1;
  int64_t chunksPerBlock = 1;  // k
  bool compact = false;        // mode "compact" (else "pipelined")
  bool inPlace = false;
  int maxChannelsPerPeer = 64;
  // reverseRoute[id]: the id of route id's reverse (the caller interns both).
  std::vector<int> reverseRoute;
  // directRoute[id]: 1 when route id is one link (two nodes); only such worker pairs take lanes
  // (tree_plan._lanes). Empty: none.
  std::vector<int> directRoute;
};

struct TreeCompileResult {
  // ranks[r].channels (all Transport::Auto) and ranks[r].workers, as PlanBuilder would hold them.
  std::vector<RankProgram> ranks;
  // channelRoutes[r][c]: the route id data sent by rank r on channel c takes, -1 none recorded.
  std::vector<std::vector<int>> channelRoutes;
  int64_t scratchChunks = 0;  // how far the ops reach into scratch
};

// Throws std::invalid_argument when a tree is malformed (a rank out of range, an arc whose parent
// was not reached first, an unknown route id, chunks outside 0..k-1) or a chunk index, count or
// channel id does not fit the op record.
TreeCompileResult compileTrees(const std::vector<TreeInput>& trees, const TreeCompileOptions& options);

}  // namespace forestcc::plan
