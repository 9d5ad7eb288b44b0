#include "executor/scratch_layout.hpp"

#include <algorithm>
#include <cstring>

#include "executor/cpu_backend.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {

// The peer-side chunk reference of an op that reaches a peer's memory (none: null).
const plan::ChunkRef* remoteSide(const plan::Op& op) {
  switch (op.code) {
    case plan::OpCode::Put:
    case plan::OpCode::PutSignal: return &op.dst;
    case plan::OpCode::Get:
    case plan::OpCode::GetReduce: return &op.src;
    case plan::OpCode::ReducePut: return &op.remote;
    default: return nullptr;
  }
}

}  // namespace

void compileScratchLayouts(const plan::Plan& p, Communicator::State& s, CompiledPlan& out, const std::string& prefix) {
  out.laysOutScratch = std::any_of(p.ranks.begin(), p.ranks.end(),
                                   [](const plan::RankProgram& r) { return !r.scratchBlocks.empty(); });
  if (!out.laysOutScratch) return;
  if (p.scratchBanks == 2)
    throw Error(ErrorCode::InvalidUsage,
                prefix + "has scratch banks (eager) and scratch_blocks: a bank's blocks are equal by design, so an "
                         "eager plan cannot size its scratch by all_to_all_v's counts",
                s.rank);
  // This rank's scratch, then every peer's whose scratch an op of this rank reaches.
  std::vector<int> ranks;
  if (p.scratchChunks) ranks.push_back(s.rank);
  for (const std::vector<plan::Op>& ops : out.workers)
    for (const plan::Op& op : ops) {
      const plan::ChunkRef* ref = remoteSide(op);
      if (!ref || ref->buffer != plan::Buffer::Scratch) continue;
      const int peer = out.channels[op.channel].peer;
      if (std::find(ranks.begin(), ranks.end(), peer) == ranks.end()) ranks.push_back(peer);
    }
  for (int r : ranks) {
    out.scratchLayouts.push_back({r, p.ranks[r].scratchBlocks});
    for (const plan::BlockSource& b : p.ranks[r].scratchBlocks)
      if (std::find(out.layoutSources.begin(), out.layoutSources.end(), b.src) == out.layoutSources.end())
        out.layoutSources.push_back(b.src);
  }
}

void Executor::layOutScratch(Call& call) {
  Communicator::State& s = *state_;
  const CompiledPlan& p = *call.plan;
  CallGeometry& g = call.geometry;
  const int n = p.nranks;
  sourceOffsets_.resize(n);
  scratchOffsets_.resize(n);
  static const Where kLayout{nullptr, 0, 0, nullptr, 0, "reading its counts to lay out scratch"};
  // Every source published its counts (its input block offsets) when it entered this call: the
  // counts exchange all_to_all_v needs before data moves. A source should not have left the call
  // yet (in 2dh its blocks still pass through this rank); the re-read of its sequence below
  // catches a plan where one can, though not every interleaving (the offsets are no seqlock).
  for (int src : p.layoutSources) {
    std::vector<uint64_t>& offsets = sourceOffsets_[src];
    offsets.resize(n + 1);
    if (src == s.rank) {
      std::memcpy(offsets.data(), g.localOffsets[0], sizeof(uint64_t) * (n + 1));
      continue;
    }
    if (s.connections[src].empty())
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(s.rank) + "plan '" + p.name + "': all_to_all_v sizes scratch blocks by the counts of rank " +
                      std::to_string(src) + " (scratch_blocks), which this rank has no connection to",
                  s.rank, src);
    awaitEntered(call, src, " and publish its counts");
    Connection& link = s.link(src);
    checkStamp(call, src, kLayout);
    std::memcpy(offsets.data(), link.peerBlockOffsets(0), sizeof(uint64_t) * (n + 1));
    if (link.peerSequence() != call.sequence)
      throw Error(ErrorCode::Internal,
                  rankPrefix(s.rank) + "plan '" + p.name + "': rank " + std::to_string(src) +
                      " left all_to_all_v call #" + std::to_string(call.sequence) +
                      " before this rank read its counts: the plan lets a rank finish before its data reached "
                      "every rank whose scratch holds it",
                  s.rank, src);
  }
  // Scratch block t holds block (src, dst): as long as src's count for dst. Blocks the layout does
  // not list are empty, so an op that uses one fails with a size mismatch instead of reading past.
  const uint64_t blocks = (p.scratchChunks + g.k - 1) / g.k;
  for (const CompiledPlan::ScratchLayout& layout : p.scratchLayouts) {
    std::vector<uint64_t>& offsets = scratchOffsets_[layout.rank];
    offsets.assign(std::max<uint64_t>(blocks, layout.blocks.size()) + 1, 0);
    for (size_t t = 0; t < offsets.size() - 1; ++t) {
      uint64_t count = 0;
      if (t < layout.blocks.size()) {
        const std::vector<uint64_t>& in = sourceOffsets_[layout.blocks[t].src];
        count = in[layout.blocks[t].dst + 1] - in[layout.blocks[t].dst];
      }
      offsets[t + 1] = offsets[t] + count;
    }
  }
  if (p.scratchChunks) {
    const std::vector<uint64_t>& mine = scratchOffsets_[s.rank];
    const uint64_t bytes = mine.back() * g.elem;
    if (bytes) ensureScratch(bytes);
    g.local[2] = bytes ? static_cast<char*>(scratch_->data()) : nullptr;
    g.localBytes[2] = bytes;
    g.localOffsets[2] = mine.data();
    // Peers reach this scratch only after this rank's first signal of the call, which publishes
    // the handle (a second mailbox message over TCP, in order before that signal).
    publishScratch(call);
    s.published();
  }
}

}  // namespace forestcc::executor
