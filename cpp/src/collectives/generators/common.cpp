#include "collectives/generators/common.hpp"

#include <algorithm>
#include <tuple>

namespace forestcc::collectives::gen {

PlanBuilder startPlan(const char* algo, const GenerateRequest& req, uint32_t chunksPerBlock) {
  std::string name = std::string(algo) + "_" + plan::name(req.collective) + "_" + std::to_string(req.nranks);
  if (plan::rooted(req.collective)) name += "_root" + std::to_string(req.root);
  if (!req.nodeOf.empty()) name += "_" + std::to_string(*std::max_element(req.nodeOf.begin(), req.nodeOf.end()) + 1) + "nodes";
  if (req.inPlace) name += "_in_place";
  return PlanBuilder(req.collective, req.nranks, chunksPerBlock, req.inPlace,
                     plan::rooted(req.collective) ? req.root : -1, name);
}

plan::Plan finishPlan(PlanBuilder& b, const char* algo, const PlanBuilder::BuildOptions& options) {
  if (b.root() >= 0) b.setParam("root", b.root());
  return b.build(std::string("forestcc.builtin.") + algo, options);
}

plan::Plan singleRankPlan(const char* algo, const GenerateRequest& req) {
  PlanBuilder b = startPlan(algo, req);
  int w = b.worker(0);
  uint32_t chunks = uint32_t(plan::inputBlocks(req.collective, 1));
  if (!req.inPlace && chunks > 0) b.copy(0, w, in(0), out(0), chunks);
  return finishPlan(b, algo);
}

AllPairs::AllPairs(PlanBuilder& b, int hub) : ids_(b.nranks(), std::vector<int>(b.nranks(), -1)) {
  for (int r = 0; r < b.nranks(); ++r)
    for (int p = r + 1; p < b.nranks(); ++p)
      if (hub < 0 || r == hub || p == hub) std::tie(ids_[r][p], ids_[p][r]) = b.channelPair(r, p);
}

std::vector<int> AllPairs::peers(int rank) const {
  const int n = int(ids_.size());
  std::vector<int> out;
  for (int d = 1; d < n; ++d)
    if (ids_[rank][(rank + d) % n] >= 0) out.push_back((rank + d) % n);
  return out;
}

int ChannelMap::at(int rank, int from, int to) {
  auto it = pairs_.find({from, to});
  if (it == pairs_.end()) it = pairs_.emplace(std::make_pair(from, to), b_.channelPair(from, to)).first;
  return rank == from ? it->second.first : it->second.second;
}

void signalAll(PlanBuilder& b, const AllPairs& ch, int r, int w) {
  for (int p : ch.peers(r)) b.signal(r, w, ch.at(r, p));
}

void waitAll(PlanBuilder& b, const AllPairs& ch, int r, int w) {
  for (int p : ch.peers(r)) b.wait(r, w, ch.at(r, p));
}

void flushAll(PlanBuilder& b, const AllPairs& ch, int r, int w) {
  for (int p : ch.peers(r)) b.flush(r, w, ch.at(r, p));
}

RingChannels::RingChannels(PlanBuilder& b) : right(b.nranks()), left(b.nranks()) {
  const int n = b.nranks();
  for (int r = 0; r < n; ++r) std::tie(right[r], left[(r + 1) % n]) = b.channelPair(r, (r + 1) % n);
}

plan::Plan shiftSendRecv(const char* algo, const GenerateRequest& req) {
  if (req.nranks == 1) return singleRankPlan(algo, req);
  PlanBuilder b = startPlan(algo, req);
  RingChannels ring(b);
  for (int r = 0; r < req.nranks; ++r) {
    int w = b.worker(r);
    b.signal(r, w, ring.left[r]);  // entered: the left neighbour may write into this rank
    b.wait(r, w, ring.right[r]);
    b.putSignal(r, w, ring.right[r], in(0), req.inPlace ? scr(0) : out(0));
    b.wait(r, w, ring.left[r]);
    if (req.inPlace) {
      b.flush(r, w, ring.right[r]);
      b.copy(r, w, scr(0), out(0));
    }
  }
  return finishPlan(b, algo);
}

void stageAllToAllInput(PlanBuilder& b, int rank, int worker) {
  const int n = b.nranks();
  if (rank > 0) b.copy(rank, worker, in(0), scr(0), uint32_t(rank));
  if (rank < n - 1) b.copy(rank, worker, in(rank + 1), scr(rank), uint32_t(n - 1 - rank));
}

void putTransfers(PlanBuilder& b, int rank, int worker, int ch, const std::vector<Transfer>& transfers) {
  size_t i = 0;
  while (i < transfers.size()) {
    size_t j = i + 1;
    while (j < transfers.size() && transfers[j].src.buffer == transfers[i].src.buffer &&
           transfers[j].dst.buffer == transfers[i].dst.buffer &&
           transfers[j].src.index == transfers[i].src.index + (j - i) &&
           transfers[j].dst.index == transfers[i].dst.index + (j - i))
      ++j;
    b.put(rank, worker, ch, transfers[i].src, transfers[i].dst, uint32_t(j - i));
    i = j;
  }
}

}  // namespace forestcc::collectives::gen
