// What the built-in generators share: the algorithm record the registry lists, the start and
// finish of every plan, the peer maps ("step -> peers and chunks") several algorithms use, and
// the few plans that more than one algorithm offers (the ring shift, the one-rank plan).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collectives/generators.hpp"
#include "collectives/plan_builder.hpp"

namespace forestcc::collectives::gen {

// One built-in algorithm. generate() gets a validated request: nranks >= 1, a supported
// collective, and for rooted collectives a root in range.
struct Algorithm {
  const char* name;
  const char* summary;
  std::vector<plan::Collective> collectives;
  plan::Plan (*generate)(const GenerateRequest&);
  // The largest message (bytes, as tuning rules count them) a plan can serve; null: no limit.
  int64_t (*maxBytes)(plan::Collective, int nranks) = nullptr;
  // Whether its plans depend on the node of each rank (GenerateRequest::nodeOf); the others get
  // requests without one, so a flat plan is the same on every layout.
  bool usesNodes = false;
};

const Algorithm& ringAlgorithm();
const Algorithm& directAlgorithm();
const Algorithm& directSmallAlgorithm();
const Algorithm& halvingDoublingAlgorithm();
const Algorithm& bruckAlgorithm();
const Algorithm& pairwiseAlgorithm();
const Algorithm& treeAlgorithm();
const Algorithm& eagerAlgorithm();
const Algorithm& hierarchicalAlgorithm();
const Algorithm& twoDimensionalAlgorithm();

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// A builder named "<algo>_<collective>_<nranks>[_in_place]".
PlanBuilder startPlan(const char* algo, const GenerateRequest& req, uint32_t chunksPerBlock = 1);
// build() with generator "forestcc.builtin.<algo>".
plan::Plan finishPlan(PlanBuilder& b, const char* algo, const PlanBuilder::BuildOptions& options = {});

// The plan of any collective on one rank: the output is the input (a copy unless in place).
plan::Plan singleRankPlan(const char* algo, const GenerateRequest& req);

// One channel pair between every two ranks, or with hub >= 0 only between the hub and every
// other rank (a star): at(r, p) is r's channel to p (-1 when there is none).
class AllPairs {
 public:
  explicit AllPairs(PlanBuilder& b, int hub = -1);
  int at(int rank, int peer) const { return ids_[rank][peer]; }
  // The peers `rank` has channels to, in staggered order r+1, r+2, ... (mod N), so that not
  // every rank addresses the same peer at once.
  std::vector<int> peers(int rank) const;
 private:
  std::vector<std::vector<int>> ids_;
};

// Channel pairs made on first use, for plans whose ranks talk to a few peers picked by rule
// (hierarchical ones): link (from, to) is one pair; (to, from) is another unless the caller
// always names the pair one way round (e.g. smaller rank first).
class ChannelMap {
 public:
  explicit ChannelMap(PlanBuilder& b) : b_(b) {}
  // The id on `rank` (from or to) of link (from, to)'s channel.
  int at(int rank, int from, int to);
 private:
  PlanBuilder& b_;
  std::map<std::pair<int, int>, std::pair<int, int>> pairs_;
};

// signal, wait or flush on rank r's channel to every peer it has one to (peers() order).
void signalAll(PlanBuilder& b, const AllPairs& ch, int r, int w);
void waitAll(PlanBuilder& b, const AllPairs& ch, int r, int w);
void flushAll(PlanBuilder& b, const AllPairs& ch, int r, int w);

// Channel pairs between neighbours on the ring r -> r+1: right[r] is r's channel to r+1 and
// left[r+1] its partner on r+1 (with 2 ranks these are two separate pairs).
struct RingChannels {
  explicit RingChannels(PlanBuilder& b);
  std::vector<int> right, left;
};

// sendrecv as a ring shift (rank r's input lands in rank r+1's output), N >= 2. Out of place
// the put goes straight into the output; in place it lands in the neighbour's scratch and is
// copied once this rank's own put has finished reading the input (flush).
plan::Plan shiftSendRecv(const char* algo, const GenerateRequest& req);

// Slot of sender q's data in receiver p's scratch when every other rank sends one piece:
// slots 0..N-2 in rank order, skipping p itself.
inline int slotOf(int sender, int receiver) { return sender < receiver ? sender : sender - 1; }

// In-place all_to_all: copies every block but the rank's own to scratch 0..N-2 (slotOf order),
// so peers may then write the output (which is the input) once this rank says it entered.
void stageAllToAllInput(PlanBuilder& b, int rank, int worker);

// Puts a list of single-chunk transfers on one channel, merging runs that are contiguous on
// both sides into one put.
struct Transfer {
  Ref src, dst;
};
void putTransfers(PlanBuilder& b, int rank, int worker, int ch, const std::vector<Transfer>& transfers);

}  // namespace forestcc::collectives::gen
