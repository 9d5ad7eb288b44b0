#include "executor/plan_checks.hpp"

#include <map>
#include <utility>
#include <vector>

#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {

struct Hasher {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  void add(uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  void add(const plan::ChunkRef& r) { add((uint64_t(r.buffer) << 32) | r.index); }
};

// Channel c of a rank reaches `peer`; it is the `index`-th channel between the two (the
// executor pairs the i-th channel a->b with the i-th b->a; loopback channel m with m ^ 1).
struct ChannelKey {
  int peer;
  int index;
  bool operator<(const ChannelKey& o) const { return peer != o.peer ? peer < o.peer : index < o.index; }
};

}  // namespace

uint64_t planHash(const plan::Plan& p) {
  Hasher x;
  x.add(static_cast<uint64_t>(p.collective));
  x.add(static_cast<uint64_t>(p.nranks));
  x.add(static_cast<uint64_t>(static_cast<int64_t>(p.root)));
  x.add(p.inPlace);
  x.add(p.chunksPerBlock);
  x.add(p.inputChunks);
  x.add(p.outputChunks);
  x.add(p.scratchChunks);
  x.add(p.maxSlices);
  x.add(p.minSliceBytes);
  x.add(p.scratchBanks);
  for (const plan::RankProgram& r : p.ranks) {
    x.add(r.channels.size());
    for (const plan::ChannelSpec& c : r.channels) x.add((uint64_t(c.peer) << 8) | uint64_t(c.transport));
    x.add(r.workers.size());
    for (const plan::WorkerProgram& w : r.workers) {
      x.add(w.ops.size());
      for (const plan::Op& op : w.ops) {
        x.add((uint64_t(op.code) << 56) | (uint64_t(op.sourceCount) << 48) | (uint64_t(op.channel) << 32) | op.count);
        x.add(op.src);
        x.add(op.dst);
        x.add(op.remote);
        for (int i = 0; i < op.sourceCount && i < plan::kMaxReduceSources; ++i) x.add(op.sources[i]);
      }
    }
    x.add(r.scratchBlocks.size());
    for (const plan::BlockSource& b : r.scratchBlocks) x.add((uint64_t(uint32_t(b.src)) << 32) | uint32_t(b.dst));
  }
  return x.h;
}

void checkSignalBalance(const plan::Plan& p, int rank) {
  const int n = static_cast<int>(p.ranks.size());
  // Per rank: the key of each channel, and signals sent / waits made on it per call.
  std::vector<std::vector<ChannelKey>> keys(n);
  std::vector<std::map<ChannelKey, int>> channelOf(n);
  std::vector<std::vector<uint64_t>> sends(n), waits(n);
  for (int r = 0; r < n; ++r) {
    const auto& channels = p.ranks[r].channels;
    std::map<int, int> seen;
    for (size_t c = 0; c < channels.size(); ++c) {
      const ChannelKey k{channels[c].peer, seen[channels[c].peer]++};
      keys[r].push_back(k);
      channelOf[r][k] = static_cast<int>(c);
    }
    sends[r].assign(channels.size(), 0);
    waits[r].assign(channels.size(), 0);
    for (const plan::WorkerProgram& w : p.ranks[r].workers)
      for (const plan::Op& op : w.ops) {
        if (op.channel >= channels.size()) continue;  // compile() reports it, naming the op
        if (op.code == plan::OpCode::Signal || op.code == plan::OpCode::PutSignal) ++sends[r][op.channel];
        if (op.code == plan::OpCode::Wait) ++waits[r][op.channel];
      }
  }
  auto ordinal = [](int index) {
    const int j = index + 1, last = j % 10;
    const char* suffix = j % 100 >= 11 && j % 100 <= 13 ? "th" : last == 1 ? "st" : last == 2 ? "nd" : last == 3 ? "rd" : "th";
    return std::to_string(j) + suffix;
  };
  for (int r = 0; r < n; ++r) {
    for (size_t c = 0; c < keys[r].size(); ++c) {
      const ChannelKey k = keys[r][c];
      if (k.peer < 0 || k.peer >= n) continue;  // compile() reports it
      // The other end: the same-numbered channel back (loopback: the partner m ^ 1).
      const ChannelKey back = k.peer == r ? ChannelKey{r, k.index ^ 1} : ChannelKey{r, k.index};
      auto it = channelOf[k.peer].find(back);
      if (it == channelOf[k.peer].end() && waits[r][c])
        throw Error(ErrorCode::InvalidUsage,
                    rankPrefix(rank) + "plan '" + p.name + "' does not balance its signals: rank " + std::to_string(r) +
                        " waits on its channel " + std::to_string(c) + " (the " + ordinal(k.index) + " to rank " +
                        std::to_string(k.peer) + ") but rank " + std::to_string(k.peer) + " has no " +
                        ordinal(back.index) + " channel back to signal it",
                    rank, k.peer);
      const uint64_t received = it == channelOf[k.peer].end() ? 0 : waits[k.peer][it->second];
      if (sends[r][c] == received) continue;
      const std::string other = it == channelOf[k.peer].end()
                                    ? "has no " + ordinal(back.index) + " channel back to rank " + std::to_string(r)
                                    : "waits " + std::to_string(received) + " times on its channel " +
                                          std::to_string(it->second);
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + "plan '" + p.name + "' does not balance its signals: rank " + std::to_string(r) +
                      " signals " + std::to_string(sends[r][c]) + " times per call on its channel " +
                      std::to_string(c) + " (the " + ordinal(k.index) + " to rank " + std::to_string(k.peer) +
                      ") but rank " + std::to_string(k.peer) + " " + other +
                      "; every call would leave the difference to the next one",
                  rank, k.peer);
    }
  }
}

}  // namespace forestcc::executor
