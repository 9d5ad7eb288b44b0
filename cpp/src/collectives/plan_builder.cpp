#include "collectives/plan_builder.hpp"

#include <algorithm>
#include <map>

#include "forestcc/error.hpp"

namespace forestcc::collectives {

namespace {

bool sameRef(Ref a, Ref b) { return a.buffer == b.buffer && a.index == b.index; }

plan::Op makeOp(plan::OpCode code, int ch = 0) {
  plan::Op op{};
  op.code = code;
  op.channel = static_cast<uint16_t>(ch);
  op.count = 1;
  return op;
}

// The refs an op names (local or remote alike) with the chunk count they cover.
std::vector<Ref> refsOf(const plan::Op& op) {
  switch (op.code) {
    case plan::OpCode::Put: case plan::OpCode::Get: case plan::OpCode::Copy:
    case plan::OpCode::PutSignal:
      return {op.src, op.dst};
    case plan::OpCode::Reduce: case plan::OpCode::ReducePut: case plan::OpCode::GetReduce: {
      std::vector<Ref> refs(op.sources, op.sources + op.sourceCount);
      refs.push_back(op.dst);
      if (op.code == plan::OpCode::ReducePut) refs.push_back(op.remote);
      if (op.code == plan::OpCode::GetReduce) refs.push_back(op.src);
      return refs;
    }
    default:
      return {};
  }
}

bool usesChannel(plan::OpCode code) {
  return code != plan::OpCode::Copy && code != plan::OpCode::Reduce;
}

}  // namespace

PlanBuilder::PlanBuilder(plan::Collective collective, int nranks, uint32_t chunksPerBlock,
                         bool inPlace, int root, std::string name) {
  if (nranks < 1 || chunksPerBlock < 1)
    throw Error(ErrorCode::Internal, "PlanBuilder: nranks and chunks per block must be >= 1");
  if (plan::rooted(collective) != (root >= 0) || root >= nranks)
    throw Error(ErrorCode::Internal, std::string("PlanBuilder: bad root for ") + plan::name(collective));
  plan_.collective = collective;
  plan_.nranks = nranks;
  plan_.chunksPerBlock = chunksPerBlock;
  plan_.inPlace = inPlace;
  plan_.root = root;
  plan_.name = name.empty() ? plan::name(collective) : std::move(name);
  plan_.inputChunks = uint64_t(plan::inputBlocks(collective, nranks)) * chunksPerBlock;
  plan_.outputChunks = uint64_t(plan::outputBlocks(collective, nranks)) * chunksPerBlock;
  plan_.ranks.resize(nranks);
}

int PlanBuilder::channel(int rank, int peer, plan::Transport transport) {
  auto& channels = plan_.ranks.at(rank).channels;
  if (channels.size() > UINT16_MAX)
    throw Error(ErrorCode::Internal, "PlanBuilder: rank " + std::to_string(rank) + " has more channels than an op can name");
  channels.push_back({peer, transport});
  return static_cast<int>(channels.size()) - 1;
}

std::pair<int, int> PlanBuilder::channelPair(int a, int b, plan::Transport transport) {
  int first = channel(a, b, transport);
  return {first, channel(b, a, transport)};
}

int PlanBuilder::worker(int rank) {
  auto& workers = plan_.ranks.at(rank).workers;
  workers.emplace_back();
  return static_cast<int>(workers.size()) - 1;
}

void PlanBuilder::noteScratch(Ref ref, uint32_t n) {
  if (ref.buffer == plan::Buffer::Scratch) scratchUsed_ = std::max<uint64_t>(scratchUsed_, uint64_t(ref.index) + n);
}

void PlanBuilder::append(int rank, int worker, const plan::Op& op) {
  for (Ref ref : refsOf(op)) noteScratch(ref, op.count);
  plan_.ranks.at(rank).workers.at(worker).ops.push_back(op);
}

void PlanBuilder::put(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n) {
  plan::Op op = makeOp(plan::OpCode::Put, ch);
  op.src = src, op.dst = dst, op.count = n;
  append(rank, worker, op);
}

void PlanBuilder::get(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n) {
  plan::Op op = makeOp(plan::OpCode::Get, ch);
  op.src = src, op.dst = dst, op.count = n;
  append(rank, worker, op);
}

void PlanBuilder::signal(int rank, int worker, int ch) { append(rank, worker, makeOp(plan::OpCode::Signal, ch)); }
void PlanBuilder::wait(int rank, int worker, int ch) { append(rank, worker, makeOp(plan::OpCode::Wait, ch)); }
void PlanBuilder::flush(int rank, int worker, int ch) { append(rank, worker, makeOp(plan::OpCode::Flush, ch)); }

void PlanBuilder::copy(int rank, int worker, Ref src, Ref dst, uint32_t n) {
  plan::Op op = makeOp(plan::OpCode::Copy);
  op.src = src, op.dst = dst, op.count = n;
  append(rank, worker, op);
}

void PlanBuilder::putSignal(int rank, int worker, int ch, Ref src, Ref dst, uint32_t n) {
  plan::Op op = makeOp(plan::OpCode::PutSignal, ch);
  op.src = src, op.dst = dst, op.count = n;
  append(rank, worker, op);
}

std::vector<Ref> PlanBuilder::reduceAllButLast(int rank, int worker, Ref dst,
                                               const std::vector<Ref>& srcs, uint32_t n) {
  // One reduce keeps the sources' order (the executor folds them in it, whichever dst aliases).
  // A chain accumulates in dst, the first source of every reduce after the first, so a source
  // that dst aliases must be read first: it moves to the front.
  std::vector<Ref> rest(srcs);
  const size_t max = plan::kMaxReduceSources;
  auto self = std::find_if(rest.begin(), rest.end(), [&](Ref r) { return sameRef(r, dst); });
  if (self != rest.end() && rest.size() > max) std::rotate(rest.begin(), self, self + 1);
  while (rest.size() > max) {
    std::vector<Ref> group(rest.begin(), rest.begin() + max);
    plan::Op op = makeOp(plan::OpCode::Reduce);
    op.dst = dst, op.count = n, op.sourceCount = static_cast<uint8_t>(group.size());
    std::copy(group.begin(), group.end(), op.sources);
    append(rank, worker, op);
    std::vector<Ref> next{dst};
    next.insert(next.end(), rest.begin() + max, rest.end());
    rest.swap(next);
  }
  return rest;
}

void PlanBuilder::reduce(int rank, int worker, Ref dst, const std::vector<Ref>& srcs, uint32_t n) {
  std::vector<Ref> last = reduceAllButLast(rank, worker, dst, srcs, n);
  plan::Op op = makeOp(plan::OpCode::Reduce);
  op.dst = dst, op.count = n, op.sourceCount = static_cast<uint8_t>(last.size());
  std::copy(last.begin(), last.end(), op.sources);
  append(rank, worker, op);
}

void PlanBuilder::reducePut(int rank, int worker, int ch, Ref dst, const std::vector<Ref>& srcs,
                            Ref remote, uint32_t n) {
  std::vector<Ref> last = reduceAllButLast(rank, worker, dst, srcs, n);
  plan::Op op = makeOp(plan::OpCode::ReducePut, ch);
  op.dst = dst, op.remote = remote, op.count = n, op.sourceCount = static_cast<uint8_t>(last.size());
  std::copy(last.begin(), last.end(), op.sources);
  append(rank, worker, op);
}

void PlanBuilder::getReduce(int rank, int worker, int ch, Ref dst, const std::vector<Ref>& srcs, Ref remote,
                            uint32_t n) {
  if (srcs.empty() || srcs.size() > size_t(plan::kMaxReduceSources - 1))
    throw Error(ErrorCode::Internal, "PlanBuilder: get_reduce takes 1.." + std::to_string(plan::kMaxReduceSources - 1) +
                                         " local sources");
  plan::Op op = makeOp(plan::OpCode::GetReduce, ch);
  op.dst = dst, op.src = remote, op.count = n, op.sourceCount = static_cast<uint8_t>(srcs.size());
  std::copy(srcs.begin(), srcs.end(), op.sources);
  append(rank, worker, op);
}

plan::Plan PlanBuilder::build(const std::string& generator, const BuildOptions& options) {
  plan_.scratchChunks = scratchUsed_;
  plan_.minBytes = options.minBytes;
  plan_.maxBytes = options.maxBytes;
  plan_.maxSlices = std::max<uint32_t>(1, options.maxSlices);
  plan_.minSliceBytes = options.minSliceBytes;
  plan_.scratchBanks = options.scratchBanks;
  plan_.generator = generator;
  check();
  return plan_;
}

void PlanBuilder::check() const {
  auto fail = [&](int rank, int worker, size_t step, const std::string& what) {
    throw Error(ErrorCode::Internal, "plan builder (" + plan_.generator + ", " + plan_.name + "): rank " +
                                         std::to_string(rank) + ", worker " + std::to_string(worker) +
                                         ", step " + std::to_string(step) + ": " + what);
  };
  const uint64_t sizes[] = {plan_.inputChunks, plan_.outputChunks, plan_.scratchChunks};
  std::map<std::pair<int, int>, int> channelCount;  // (rank, peer) -> channels
  for (int r = 0; r < plan_.nranks; ++r) {
    const auto& rank = plan_.ranks[r];
    for (const auto& ch : rank.channels) {
      if (ch.peer < 0 || ch.peer >= plan_.nranks) fail(r, -1, 0, "channel to a peer out of range");
      ++channelCount[{r, ch.peer}];
    }
    std::vector<int> owner(rank.channels.size(), -1);
    for (size_t w = 0; w < rank.workers.size(); ++w) {
      const auto& ops = rank.workers[w].ops;
      for (size_t s = 0; s < ops.size(); ++s) {
        const plan::Op& op = ops[s];
        if (op.count < 1) fail(r, int(w), s, "n must be >= 1");
        for (Ref ref : refsOf(op)) {
          if (uint64_t(ref.index) + op.count > sizes[static_cast<int>(ref.buffer)])
            fail(r, int(w), s, std::string(plan::name(op.code)) + ": " + plan::name(ref.buffer) + " chunk " +
                                   std::to_string(ref.index) + " + " + std::to_string(op.count) +
                                   " is out of range");
        }
        if (!usesChannel(op.code)) continue;
        if (op.channel >= rank.channels.size()) fail(r, int(w), s, "channel id out of range");
        int& user = owner[op.channel];
        if (user >= 0 && user != int(w)) fail(r, int(w), s, "channel used by two workers");
        user = int(w);
      }
    }
  }
  for (const auto& [key, count] : channelCount) {
    auto [r, p] = key;
    int partner = channelCount.count({p, r}) ? channelCount.at({p, r}) : 0;
    if ((r == p && count % 2 != 0) || (r != p && count != partner))
      fail(r, -1, 0, "unmatched channels to rank " + std::to_string(p));
  }
}

}  // namespace forestcc::collectives
