// The tuning table algo="auto" reads: which built-in algorithm serves which collective at which
// message size, rank count, memory kind and placement. Loaded here, with no Python involved:
// FORESTCC_TUNING (the config table) names a file; else $XDG_CONFIG_HOME/forestcc/tuning.json
// (what forestcc-perf --tune writes) when it exists; else the table built into libforestcc from
// python/forestcc/data/tuning.json. The format is documented in python/forestcc/tuning.py, which
// keeps the tooling (--tune, showing the table) on top and checks tables with parseTuningTable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::collectives {

// Which memory a call's buffers are in, for tuning rules: any (the rule does not care), private
// (ordinary process memory: peers reach it with cross-process calls) or shared (forestcc.empty:
// peers map it).
constexpr int kAnyMemory = -1, kPrivateMemory = 0, kSharedMemory = 1, kDeviceMemory = 2;
// Whether a rule is for out-of-place calls, in-place calls, or both (kAnyPlacement).
constexpr int kAnyPlacement = -1, kOutOfPlace = 0, kInPlace = 1;

// One row of the tuning table: for `collective` on [minRanks, maxRanks] ranks spread over
// [minNodes, maxNodes] nodes and messages of [minBytes, maxBytes] bytes (maxBytes < 0:
// unbounded), of `memory` and placement `inPlace`, use `algorithm`. First match wins. A rule
// that names no nodes is for one node.
struct TuningRule {
  plan::Collective collective;
  int minRanks = 1, maxRanks = 1 << 30;
  int minNodes = 1, maxNodes = 1;
  uint64_t minBytes = 0;
  int64_t maxBytes = -1;
  int memory = kAnyMemory;
  int inPlace = kAnyPlacement;
  std::string algorithm;
};

// The rules of a table in JSON text; errors (InvalidUsage) name `source` and the rule. This is
// the one check of a table (forestcc.tuning.validate_table calls it too). Rules for all_to_all_v
// are checked, then dropped: it shares all_to_all's.
std::vector<TuningRule> parseTuningTable(const std::string& text, const std::string& source);
// The rules of the active table (see above).
std::vector<TuningRule> loadTuningTable();

// Rules as the engine keeps them for `nranks` ranks: a rule never picks an algorithm for
// messages its plans cannot serve (eager: its bank); the sizes it gives up go to the rule that
// took over where it ended (same collective, ranks, nodes, memory and placement), which --tune
// measured next, rather than to no rule at all.
void clampToAlgorithms(std::vector<TuningRule>& rules, int nranks);

// What selection looks at in a call.
struct CallShape {
  plan::Collective collective;
  int nranks = 1;
  int nodes = 1;
  uint64_t bytes = 0;  // the larger of input and output
  int memory = kAnyMemory;
  int inPlace = kAnyPlacement;
};
// The algorithm of the first rule that matches ("" when none does). memory kAnyMemory (unknown)
// matches only rules without a memory kind, inPlace kAnyPlacement only rules without a
// placement. On several nodes an eager rule never matches: its scratch banks are reached only
// through shared memory mapped on one node.
const std::string& selectAlgorithm(const std::vector<TuningRule>& rules, const CallShape& call);

}  // namespace forestcc::collectives
