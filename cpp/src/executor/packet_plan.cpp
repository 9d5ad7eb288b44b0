#include "executor/packet_plan.hpp"

#include <map>
#include <utility>

#include "executor/packets.hpp"

namespace forestcc::executor {

using plan::OpCode;

namespace {

// What one rank does on one of its channels.
struct ChannelUse {
  int worker = -1;                         // the one worker that uses it
  std::vector<const plan::Op*> sends;      // its put_signals, in order
  std::vector<std::pair<int, size_t>> waits;  // its waits: (worker, op index), in order
};

}  // namespace

bool markPacketWaits(const plan::Plan& p, int rank, const std::vector<int>& nodeOf,
                     std::vector<std::vector<plan::Op>>& workers) {
  if (p.scratchBanks != 2 || p.maxSlices > 1) return false;
  const int n = p.nranks;
  for (int r = 0; r < n; ++r)
    if (nodeOf[r] != nodeOf[0]) return false;
  // Channel c of rank r to peer q is the pair-th such channel of r: it signals q's channel with
  // the same pair number to r (executor.cpp, compile).
  std::vector<std::vector<int>> pairOf(n);
  std::vector<std::vector<ChannelUse>> uses(n);
  for (int r = 0; r < n; ++r) {
    const plan::RankProgram& rp = p.ranks[r];
    std::map<int, int> count;
    for (const plan::ChannelSpec& c : rp.channels) {
      if (c.peer == r || c.peer < 0 || c.peer >= n) return false;
      pairOf[r].push_back(count[c.peer]++);
    }
    uses[r].resize(rp.channels.size());
    for (size_t w = 0; w < rp.workers.size(); ++w) {
      const std::vector<plan::Op>& ops = rp.workers[w].ops;
      for (size_t i = 0; i < ops.size(); ++i) {
        const plan::Op& op = ops[i];
        if (op.code == OpCode::Copy || op.code == OpCode::Reduce) continue;
        if (op.channel >= rp.channels.size()) return false;
        if (op.code == OpCode::Flush) continue;
        ChannelUse& use = uses[r][op.channel];
        if (use.worker >= 0 && use.worker != static_cast<int>(w)) return false;
        use.worker = static_cast<int>(w);
        if (op.code == OpCode::PutSignal && op.dst.buffer == plan::Buffer::Scratch) use.sends.push_back(&op);
        else if (op.code == OpCode::Wait) use.waits.emplace_back(static_cast<int>(w), i);
        else return false;
      }
    }
  }
  // The channel of rank q that rank r's channel c signals (-1: none).
  auto partner = [&](int r, size_t c) {
    const int q = p.ranks[r].channels[c].peer;
    for (size_t d = 0; d < p.ranks[q].channels.size(); ++d)
      if (p.ranks[q].channels[d].peer == r && pairOf[q][d] == pairOf[r][c]) return static_cast<int>(d);
    return -1;
  };
  for (int r = 0; r < n; ++r)
    for (size_t c = 0; c < uses[r].size(); ++c) {
      const int d = partner(r, c);
      const ChannelUse* back = d < 0 ? nullptr : &uses[p.ranks[r].channels[c].peer][d];
      if (uses[r][c].sends.size() != (back ? back->waits.size() : 0)) return false;
      if (uses[r][c].waits.size() != (back ? back->sends.size() : 0)) return false;
    }
  // With signals, a wait on one channel also makes visible what the peer put (and flushed) before
  // it on another; a packet is there only once its own wait unpacked it. So each scratch chunk
  // that a put fills must be filled by that put alone, and touched by its rank only after the
  // wait for it, in the same worker.
  for (int r = 0; r < n; ++r) {
    std::map<uint32_t, std::pair<int, size_t>> filledAt;  // chunk -> (worker, op) of its wait
    for (size_t c = 0; c < uses[r].size(); ++c) {
      const int d = partner(r, c);
      if (d < 0) continue;
      const ChannelUse& back = uses[p.ranks[r].channels[c].peer][d];
      for (size_t k = 0; k < back.sends.size(); ++k)
        for (uint32_t j = 0; j < back.sends[k]->count; ++j)
          if (!filledAt.emplace(back.sends[k]->dst.index + j, uses[r][c].waits[k]).second) return false;
    }
    const plan::RankProgram& rp = p.ranks[r];
    for (size_t w = 0; w < rp.workers.size(); ++w)
      for (size_t i = 0; i < rp.workers[w].ops.size(); ++i) {
        const plan::Op& op = rp.workers[w].ops[i];
        auto early = [&](const plan::ChunkRef& ref) {
          if (ref.buffer != plan::Buffer::Scratch) return false;
          for (uint32_t j = 0; j < op.count; ++j) {
            auto found = filledAt.find(ref.index + j);
            if (found != filledAt.end() && (found->second.first != static_cast<int>(w) || found->second.second >= i))
              return true;
          }
          return false;
        };
        bool touches = false;
        switch (op.code) {
          case OpCode::Copy: touches = early(op.src) || early(op.dst); break;
          case OpCode::Reduce:
            touches = early(op.dst);
            for (int k = 0; k < op.sourceCount && !touches; ++k) touches = early(op.sources[k]);
            break;
          case OpCode::PutSignal: touches = early(op.src); break;  // its dst is the peer's
          default: break;
        }
        if (touches) return false;
      }
  }
  for (size_t c = 0; c < uses[rank].size(); ++c) {
    const ChannelUse& use = uses[rank][c];
    if (use.waits.empty()) continue;
    const ChannelUse& back = uses[p.ranks[rank].channels[c].peer][partner(rank, c)];
    for (size_t k = 0; k < use.waits.size(); ++k) {
      plan::Op& wait = workers[use.waits[k].first][use.waits[k].second];
      wait.dst = back.sends[k]->dst;
      wait.count = back.sends[k]->count;
      wait.sourceCount = kPacketWait;
    }
  }
  return true;
}

}  // namespace forestcc::executor
