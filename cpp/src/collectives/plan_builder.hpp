// PlanBuilder: compose a plan::Plan rank by rank, worker by worker, op by op; the C++ twin of
// forestcc.plan.PlanBuilder (python/forestcc/plan/builder.py), used by the built-in generators.
//
//   PlanBuilder b(plan::Collective::AllGather, 2);
//   auto [to1, to0] = b.channelPair(0, 1);
//   int w0 = b.worker(0);
//   b.put(0, w0, to1, in(0), out(0)); b.signal(0, w0, to1); ...
//   plan::Plan p = b.build("forestcc.builtin.my_generator");
//
// build() sets the input/output sizes from the collective, nranks and k, and the scratch size
// from the largest scratch ref used (scratch has the same size on every rank, so remote refs
// count too). It checks what a generator bug could break (refs in range, channel ids, matched
// channel counts) and throws ErrorCode::Internal naming the rank, worker and step.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::collectives {

using Ref = plan::ChunkRef;

inline Ref in(uint32_t index) { return {plan::Buffer::Input, index}; }
inline Ref out(uint32_t index) { return {plan::Buffer::Output, index}; }
inline Ref scr(uint32_t index) { return {plan::Buffer::Scratch, index}; }

class PlanBuilder {
 public:
  // root: required (>= 0) for rooted collectives, -1 otherwise.
  PlanBuilder(plan::Collective collective, int nranks, uint32_t chunksPerBlock = 1,
              bool inPlace = false, int root = -1, std::string name = "");

  plan::Collective collective() const { return plan_.collective; }
  int nranks() const { return plan_.nranks; }
  uint32_t chunksPerBlock() const { return plan_.chunksPerBlock; }
  bool inPlace() const { return plan_.inPlace; }
  int root() const { return plan_.root; }

  // -- structure ---------------------------------------------------------------------------
  // A channel on `rank` to `peer`; returns its id. The i-th channel rank->peer pairs with the
  // i-th channel peer->rank, so add partners in the same order (or use channelPair).
  int channel(int rank, int peer, plan::Transport transport = plan::Transport::Auto);
  // A matched pair: (id on rank a towards b, id on rank b towards a).
  std::pair<int, int> channelPair(int a, int b, plan::Transport transport = plan::Transport::Auto);
  // A worker (CPU thread / GPU thread block) on `rank`; returns its id.
  int worker(int rank);

  // -- ops (n: contiguous chunks) ----------------------------------------------------------
  void put(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n = 1);
  void get(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n = 1);
  void signal(int rank, int worker, int ch);
  void wait(int rank, int worker, int ch);
  void flush(int rank, int worker, int ch);
  void copy(int rank, int worker, Ref src, Ref dst, uint32_t n = 1);
  // dst = op(srcs) elementwise; dst may be one of srcs. More than kMaxReduceSources sources
  // become a chain of reduces that accumulate into dst.
  void reduce(int rank, int worker, Ref dst, const std::vector<Ref>& srcs, uint32_t n = 1);
  // reduce, then put local dst to the peer's remote (chained like reduce when needed).
  void reducePut(int rank, int worker, int ch, Ref dst, const std::vector<Ref>& srcs, Ref remote,
                 uint32_t n = 1);
  void putSignal(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n = 1);
  // dst = op(srcs..., the peer's remote chunks), reading the peer's memory directly (one pass
  // where get + reduce takes two). 1..kMaxReduceSources-1 local sources.
  void getReduce(int rank, int worker, int ch, Ref dst, const std::vector<Ref>& srcs, Ref remote, uint32_t n = 1);

  // -- result ------------------------------------------------------------------------------
  struct BuildOptions {
    uint64_t minBytes = 0;
    int64_t maxBytes = -1;  // -1: no upper bound
    uint32_t maxSlices = 1;
    uint64_t minSliceBytes = 0;
    uint32_t scratchBanks = 1;  // 2: eager plan (plan.hpp, Plan::scratchBanks)
  };
  void setParam(const std::string& key, int64_t value) { plan_.params[key] = value; }
  // Which data block each of `rank`'s scratch blocks holds (plan.hpp, RankProgram::scratchBlocks).
  void setScratchBlocks(int rank, std::vector<plan::BlockSource> blocks) {
    plan_.ranks.at(rank).scratchBlocks = std::move(blocks);
  }
  plan::Plan build(const std::string& generator, const BuildOptions& options);
  plan::Plan build(const std::string& generator) { return build(generator, BuildOptions{}); }

 private:
  void append(int rank, int worker, const plan::Op& op);
  void noteScratch(Ref ref, uint32_t n);
  // Splits srcs into reduces of at most kMaxReduceSources; returns the sources of the last one.
  std::vector<Ref> reduceAllButLast(int rank, int worker, Ref dst, const std::vector<Ref>& srcs,
                                    uint32_t n);
  void check() const;

  plan::Plan plan_;
  uint64_t scratchUsed_ = 0;
};

}  // namespace forestcc::collectives
