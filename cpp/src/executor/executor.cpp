#include "executor/executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/on_error.hpp"
#include "core/wait.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/device_runner.hpp"
#include "executor/packet_plan.hpp"
#include "executor/plan_checks.hpp"
#include "executor/scratch_layout.hpp"
#include "executor/cpu_isa.hpp"
#include "executor/reduce_kernels.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

using plan::Buffer;
using plan::OpCode;

struct Executor::WorkerThread {
  std::thread thread;
  uint64_t seen = 0;
};

// ---- construction and compilation ----------------------------------------------------------

Executor::Executor(std::shared_ptr<Communicator::State> state)
    : state_(std::move(state)),
      streamingBytes_(static_cast<uint64_t>(config::streamingBytes())),
      debug_(config::debug()),
      packets_(config::packets()),
      hugePages_(static_cast<uint64_t>(config::hugePageBytes())) {
  cpuIsaInUse();  // a bad FORESTCC_CPU_ISA is an error here, not in the first reduction
  expected_.assign(static_cast<size_t>(state_->size) * kMaxPlanChannelsPerPeer, 0);
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> g(poolMu_);
    stopping_ = true;
  }
  poolCv_.notify_all();
  for (auto& t : threads_)
    if (t->thread.joinable()) t->thread.join();
}

std::shared_ptr<const CompiledPlan> Executor::compile(const plan::Plan& p) {
  Communicator::State& s = *state_;
  const std::string prefix = rankPrefix(s.rank) + "plan '" + p.name + "': ";
  if (p.nranks != s.size)
    throw Error(ErrorCode::InvalidUsage, prefix + "is for " + std::to_string(p.nranks) +
                                             " ranks but the communicator has " + std::to_string(s.size), s.rank);
  if (static_cast<int>(p.ranks.size()) != p.nranks)
    throw Error(ErrorCode::InvalidUsage, prefix + "has " + std::to_string(p.ranks.size()) + " rank programs", s.rank);
  const int me = s.localIndex(s.rank);
  auto out = std::make_shared<CompiledPlan>();
  out->name = p.name;
  out->collective = p.collective;
  out->nranks = p.nranks;
  out->root = p.root;
  out->inPlace = p.inPlace;
  out->chunksPerBlock = p.chunksPerBlock;
  out->inputChunks = p.inputChunks;
  out->outputChunks = p.outputChunks;
  out->scratchChunks = p.scratchChunks;
  out->maxSlices = std::max<uint32_t>(1, p.maxSlices);
  out->minSliceBytes = p.minSliceBytes;
  if (p.scratchBanks != 1 && p.scratchBanks != 2)
    throw Error(ErrorCode::InvalidUsage, prefix + "scratch_banks must be 1 or 2, got " + std::to_string(p.scratchBanks),
                s.rank);
  out->scratchBanks = p.scratchBanks;
  std::snprintf(out->stamp.family, sizeof out->stamp.family, "%s",
                (p.generator.empty() ? p.name : p.generator).c_str());
  out->stamp.planHash = planHash(p);
  out->stamp.root = p.root;
  out->stamp.collective = static_cast<uint8_t>(p.collective);
  const plan::RankProgram& mine = p.ranks[s.rank];
  std::map<int, int> pairIndex;
  int loopbacks = 0;
  for (size_t c = 0; c < mine.channels.size(); ++c) {
    const int peer = mine.channels[c].peer;
    const std::string where = prefix + "channel " + std::to_string(c) + " to rank " + std::to_string(peer) + ": ";
    if (peer < 0 || peer >= s.size) throw Error(ErrorCode::InvalidUsage, where + "peer out of range", s.rank);
    // A channel's transport in the plan says what it was made for; the communicator's
    // connection to the peer decides what carries it (shm or cma on this node, tcp to others).
    if (mine.channels[c].transport == plan::Transport::CudaIpc)
      throw Error(ErrorCode::InvalidUsage,
                  where + "needs a cuda_ipc channel; this version executes plans on host memory only", s.rank, peer);
    if (s.nodeOf[peer] == s.nodeOf[s.rank] && (s.localIndex(peer) >= kMaxLocalRanks || me >= kMaxLocalRanks))
      throw Error(ErrorCode::InvalidUsage, where + "plans support at most " + std::to_string(kMaxLocalRanks) +
                                               " ranks per node", s.rank, peer);
    ExecChannel ch;
    ch.peer = peer;
    if (peer == s.rank) {
      // A loopback pair: channel m signals the inbound word of channel m ^ 1, both this rank's.
      const int m = loopbacks++;
      if (m >= kMaxPlanChannelsPerPeer)
        throw Error(ErrorCode::InvalidUsage, where + "too many loopback channels (limit " +
                                                 std::to_string(kMaxPlanChannelsPerPeer) + ")", s.rank);
      ch.pair = m;
      ch.inbound = s.inboundWord(SemaphoreSet::Plan, peer, m);
      ch.outbound = s.inboundWord(SemaphoreSet::Plan, peer, m ^ 1);
      ch.doorbell = &s.control->doorbell;
      ch.expected = &expected_[static_cast<size_t>(s.rank) * kMaxPlanChannelsPerPeer + m];
    } else {
      const int i = pairIndex[peer]++;
      if (i >= kMaxPlanChannelsPerPeer)
        throw Error(ErrorCode::InvalidUsage, where + "too many channels to one peer (limit " +
                                                 std::to_string(kMaxPlanChannelsPerPeer) + ")", s.rank, peer);
      ch.pair = i;
      ch.link = &s.link(peer);
      ch.inbound = s.inboundWord(SemaphoreSet::Plan, peer, i);
      ch.outbound = ch.link->signalWord(SemaphoreSet::Plan, i);
      ch.doorbell = ch.link->peerDoorbell();
      ch.expected = &expected_[static_cast<size_t>(peer) * kMaxPlanChannelsPerPeer + i];
      if (p.scratchBanks == 2)
        for (int b = 0; b < 2; ++b) {
          ch.banks[b].region = ch.link->peerBank(b);
          ch.banks[b].connection = ch.link;
        }
    }
    out->channels.push_back(ch);
  }
  if (loopbacks % 2)
    throw Error(ErrorCode::InvalidUsage, prefix + "has an odd number of loopback channels on rank " +
                                             std::to_string(s.rank), s.rank);
  std::vector<bool> waitsOn(p.nranks, false);
  for (const auto& w : mine.workers) {
    for (const plan::Op& op : w.ops) {
      if (op.code != OpCode::Copy && op.code != OpCode::Reduce && op.channel >= out->channels.size())
        throw Error(ErrorCode::InvalidUsage, prefix + "an op names channel " + std::to_string(op.channel) +
                                                 ", which rank " + std::to_string(s.rank) + " does not have", s.rank);
      if (op.code == OpCode::Wait) waitsOn[out->channels[op.channel].peer] = true;
    }
    out->workers.push_back(w.ops);
    // The links this worker puts through: flushed when it ends (schedules/README.md, "Memory
    // ordering"), so no put of a call still reads its source once the call returned.
    std::vector<Connection*> links;
    for (const plan::Op& op : w.ops) {
      const bool puts = op.code == OpCode::Put || op.code == OpCode::ReducePut || op.code == OpCode::PutSignal;
      Connection* link = puts ? out->channels[op.channel].link : nullptr;
      if (link && std::find(links.begin(), links.end(), link) == links.end()) links.push_back(link);
    }
    out->workerLinks.push_back(std::move(links));
    // The peers' call buffers it writes into (puts into an eager plan's scratch go to the peer's
    // bank in its control block, which outlives any call).
    for (const plan::Op& op : w.ops) {
      const plan::ChunkRef* there = op.code == OpCode::Put || op.code == OpCode::PutSignal ? &op.dst
                                    : op.code == OpCode::ReducePut                         ? &op.remote
                                                                                           : nullptr;
      Connection* link = there ? out->channels[op.channel].link : nullptr;
      if (!link || (p.scratchBanks == 2 && there->buffer == plan::Buffer::Scratch)) continue;
      if (std::find(out->bufferLinks.begin(), out->bufferLinks.end(), link) == out->bufferLinks.end())
        out->bufferLinks.push_back(link);
    }
  }
  // Eager plans rely on every rank hearing from every other in each call (schedules/README.md,
  // "Scratch banks"; the verifier proves it of every plan file and dict before it runs). Cheap to
  // check here too, for a plan compiled without the proof (through the engine directly, or a
  // C++ caller's file): a direct wait on every peer (which the built-in eager plans have).
  if (p.scratchBanks == 2)
    for (int r = 0; r < p.nranks; ++r)
      if (r != s.rank && !waitsOn[r])
        throw Error(ErrorCode::InvalidUsage,
                    prefix + "has scratch banks (an eager plan) but rank " + std::to_string(s.rank) +
                        " never waits on rank " + std::to_string(r) +
                        ": an eager plan must wait on every other rank in every call",
                    s.rank, r);
  out->packetable = markPacketWaits(p, s.rank, s.nodeOf, out->workers);
  out->banksMapped = std::all_of(out->channels.begin(), out->channels.end(), [](const ExecChannel& ch) {
    return !ch.link || (ch.banks[0].region.mapped && ch.banks[1].region.mapped);
  });
  compileScratchLayouts(p, s, *out, prefix);
  // After this rank's own checks, which name the op or the peer more precisely.
  checkSignalBalance(p, s.rank);
  return out;
}

bool Executor::usesPackets(const CompiledPlan& p, const CallGeometry& g, uint64_t scratchBytes, bool device) const {
  if (!p.packetable || g.slices != 1 || (!device && !p.banksMapped)) return false;
  const bool wanted = packets_ == config::PacketMode::On || (packets_ == config::PacketMode::Auto && device);
  return wanted && packetSlotBytes(scratchBytes, p.scratchChunks) <= kPacketBankBytes;
}

// ---- memory of the call --------------------------------------------------------------------

void Executor::ensureScratch(uint64_t bytes) {
  if (scratch_ && scratch_->size() >= bytes) return;
  // Grow by doubling so a sweep over sizes reallocates a few times, not every call. Peers keep
  // their mapping of the old allocation until they drop it; it is released now.
  uint64_t size = scratch_ ? scratch_->size() : (1u << 20);
  while (size < bytes) size *= 2;
  // The new one is made before the old is released, so the two never share an address (which
  // publish() tells scratches apart by).
  auto grown = std::make_unique<SharedAllocation>(size);
  scratch_ = std::move(grown);
}

// ---- running ---------------------------------------------------------------------------------

void Executor::beginCall(Call& call, const CompiledPlan& p, const CallBuffers& buffers) {
  Communicator::State& s = *state_;
  if (s.poisoned()) {
    // A peer already found this very call mismatched: this rank's part of it raises the same.
    const bool thisCall = s.poisonedCode() == ErrorCode::Mismatch && s.poisonedCall() == sequence_ + 1;
    throw Error(thisCall ? ErrorCode::Mismatch : ErrorCode::Aborted,
                rankPrefix(s.rank) + "the communicator was poisoned; " + s.abortReason(), s.rank);
  }
  call.plan = &p;
  call.buffers = &buffers;
  CallGeometry& g = call.geometry;
  g.elem = static_cast<uint32_t>(elementSize(buffers.dtype));
  g.count = buffers.count;
  g.k = p.chunksPerBlock;
  call.variable = !buffers.inCounts.empty();
}

uint32_t Executor::slicesOf(const CompiledPlan& p, const CallGeometry& g, uint64_t minSliceFloor) {
  if (p.minSliceBytes == 0) return p.maxSlices;
  const uint64_t chunkBytes = (g.count / g.k) * g.elem;
  return static_cast<uint32_t>(std::max<uint64_t>(
      1, std::min<uint64_t>(p.maxSlices, chunkBytes / std::max<uint64_t>(p.minSliceBytes, minSliceFloor))));
}

void Executor::numberCall(Call& call) {
  const CompiledPlan& p = *call.plan;
  call.sequence = ++sequence_;
  CallStamp& st = call.stamp;
  st = p.stamp;
  st.sequence = call.sequence;
  st.count = call.geometry.count;
  // Only what the call uses: a barrier has no data, only reductions have an operator.
  st.dtype = p.collective == plan::Collective::Barrier ? 0 : static_cast<uint8_t>(call.buffers->dtype);
  const auto op = static_cast<uint8_t>(call.buffers->op);
  st.op = plan::reduces(p.collective) ? static_cast<uint8_t>(op | (call.buffers->preMultiplied ? kPreMultipliedOp : 0)) : 0;
  st.variable = call.variable;
  // Ranks that disagree on whether this call moves its data as packets would not find each
  // other's data: the decision (FORESTCC_PACKETS, the memory kind, whether the banks are mapped,
  // whether the packets fit) is part of what the stamps compare. The decision, not the setting:
  // "on" and "auto" both mean packets on GPU memory, and no setting matters to a call too large.
  if (call.geometry.packets) st.planHash ^= kPacketsStampFold;
}

void Executor::run(const CompiledPlan& p, const CallBuffers& buffers) {
  Communicator::State& s = *state_;
  Call call;
  beginCall(call, p, buffers);
  // Before this call takes its number and bank: a wait that fails here (a timeout, Ctrl-C)
  // leaves the communicator as it was, and a retried call waits here again.
  awaitStampWindow(sequence_ + 1);
  // From here to its number, an error is this rank's own: the call is refused.
  OnError refusal([this] { refuseCall(); });
  CallGeometry& g = call.geometry;
  std::vector<uint64_t> offsets[2];
  if (call.variable) {
    if (p.scratchChunks && !p.laysOutScratch)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "plan '" + p.name +
                                               "' uses scratch but has no scratch_blocks; all_to_all_v needs a "
                                               "plan without scratch (algo 'direct' or 'pairwise') or with "
                                               "scratch_blocks (algo '2dh')", s.rank);
    if (p.nranks > kMaxVariableBlocks)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "all_to_all_v supports at most " +
                                               std::to_string(kMaxVariableBlocks) + " ranks", s.rank);
    const std::vector<uint64_t>* counts[2] = {&buffers.inCounts, &buffers.outCounts};
    for (int b = 0; b < 2; ++b) {
      offsets[b].assign(p.nranks + 1, 0);
      for (int r = 0; r < p.nranks; ++r) offsets[b][r + 1] = offsets[b][r] + (*counts[b])[r];
      g.localOffsets[b] = offsets[b].data();
    }
    g.slices = 1;
  } else {
    g.slices = slicesOf(p, g);
  }
  const uint64_t blockBytes = g.count * g.elem;
  // all_to_all_v's scratch blocks are sized by other ranks' counts: after publishing (layOutScratch).
  const uint64_t scratchBytes = call.variable ? 0 : (p.scratchChunks + g.k - 1) / g.k * blockBytes;
  if (p.scratchBanks == 2) {
    // Checked before anything is published: every rank has the same count and fails alike.
    if (scratchBytes > kScratchBankBytes)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(s.rank) + "plan '" + p.name + "' is eager (scratch banks): this call needs " +
                      std::to_string(scratchBytes) + " bytes of scratch but a bank holds " +
                      std::to_string(kScratchBankBytes) + "; use it for smaller messages, or another algorithm",
                  s.rank);
    call.packetFlag = packetFlag(eagerCalls_);
    call.bank = static_cast<int>(eagerCalls_++ & 1);
    g.eager = true;
    g.local[2] = s.bank(call.bank);
    g.packets = usesPackets(p, g, scratchBytes, false);
    g.packetBase = kScratchBankBytes;
  } else {
    if (scratchBytes) ensureScratch(scratchBytes);
    g.local[2] = scratchBytes ? static_cast<char*>(scratch_->data()) : nullptr;
  }
  g.local[0] = static_cast<char*>(buffers.input);
  g.local[1] = static_cast<char*>(buffers.output);
  g.localBytes[0] = buffers.inputBytes;
  g.localBytes[1] = buffers.outputBytes;
  g.localBytes[2] = scratchBytes;
  // Streaming stores pay off once the node's data of the call cannot stay in the cache: every
  // local rank's input and output (one buffer in place). Below that they push data to memory
  // that the next op, or the peer, would have found in cache.
  const uint64_t own = p.inPlace ? std::max(buffers.inputBytes, buffers.outputBytes) : buffers.inputBytes + buffers.outputBytes;
  call.streaming = own * s.localRanks.size() >= streamingBytes_;
  numberCall(call);
  refusal.dismiss();
  const CallStamp& st = call.stamp;

  const int workers = static_cast<int>(p.workers.size());
  if (static_cast<int>(views_.size()) < std::max(workers, 1)) {
    views_.resize(std::max(workers, 1), std::vector<PeerView>(s.size));
    bounce_.resize(views_.size());
  }
  publish(call);
  // Once every worker is done (on every way out below): this rank lets go of the peers' buffers
  // it held, then, when the call fails, waits until no peer still holds its own.
  struct LeaveCall {
    const Executor::Call& call;
    Communicator::State& s;
    size_t held = 0;  // p.bufferLinks[0, held)
    bool failed = true;
    ~LeaveCall() {
      for (size_t i = 0; i < held; ++i) call.plan->bufferLinks[i]->releaseBuffers(call.sequence);
      if (failed) s.awaitBufferHolders();
    }
  } leave{call, s};
  // Once published, an error on this rank (a size that disagrees with a peer's, say) poisons the
  // communicator: the peers waiting on this rank learn why now, not at their timeout. When another
  // rank poisoned it first, its report is the cause and this rank's error a symptom (a peer's
  // memory gone because it left the call, say): the caller gets the report.
  auto callName = [&] { return "collective #" + std::to_string(call.sequence) + " (" + describeCall(st) + ")"; };
  auto poisonWith = [&](const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      s.poison(e.what(), e.code() == ErrorCode::Mismatch ? ErrorCode::Mismatch : ErrorCode::Aborted, call.sequence);
    } catch (const std::exception& e) {
      s.poison(e.what());
    }
  };
  // Another rank's report replaces this rank's error, except an interrupt: the program's own
  // KeyboardInterrupt handling must run.
  auto poisonedElsewhere = [&](const std::exception_ptr& error) {
    const int by = s.poisonedBy();
    if (by < 0 || by == s.rank) return false;
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      return e.code() != ErrorCode::Interrupted;
    } catch (...) {
    }
    return true;
  };
  // Before a worker may write into a peer's buffers (a poisoned peer is leaving the call).
  for (Connection* link : p.bufferLinks) {
    if (!link->holdBuffers(call.sequence)) {
      const std::exception_ptr error = std::make_exception_ptr(
          Error(ErrorCode::Aborted,
                rankPrefix(s.rank) + callName() + ": rank " + std::to_string(link->peer()) +
                    " is leaving the call (its side of the communicator was poisoned) before this rank wrote into "
                    "its buffers",
                s.rank, link->peer()));
      poisonWith(error);
      if (poisonedElsewhere(error)) s.raisePoisoned(callName(), -1);
      std::rethrow_exception(error);
    }
    ++leave.held;
  }
  if (call.variable && p.laysOutScratch) {
    try {
      layOutScratch(call);
    } catch (...) {
      poisonWith(std::current_exception());
      if (poisonedElsewhere(std::current_exception())) s.raisePoisoned(callName(), -1);
      throw;
    }
  }
  if (workers == 1) {
    try {
      runWorker(call, 0);
    } catch (...) {
      poisonWith(std::current_exception());
      if (poisonedElsewhere(std::current_exception())) s.raisePoisoned(callName(), -1);
      throw;
    }
  } else if (workers > 1) {
    {
      std::unique_lock<std::mutex> g(poolMu_);
      while (static_cast<int>(threads_.size()) < workers - 1) {
        auto t = std::make_unique<WorkerThread>();
        const int index = static_cast<int>(threads_.size()) + 1;
        WorkerThread* self = t.get();
        self->seen = generation_;
        t->thread = std::thread([this, self, index] {
          std::unique_lock<std::mutex> lk(poolMu_);
          while (true) {
            poolCv_.wait(lk, [&] { return stopping_ || generation_ != self->seen; });
            if (stopping_) return;
            self->seen = generation_;
            // A thread that the call does not use (a plan with fewer workers than an earlier one)
            // is not counted in pending_: the call may have ended, and current_ gone, before it
            // woke (it must not read the plan then).
            Call* c = current_;
            if (!c || index >= static_cast<int>(c->plan->workers.size())) continue;
            lk.unlock();
            try {
              runWorker(*c, index);
            } catch (...) {
              std::lock_guard<std::mutex> e(poolMu_);
              if (!firstError_) firstError_ = std::current_exception();
            }
            lk.lock();
            if (--pending_ == 0) doneCv_.notify_all();
          }
        });
        threads_.push_back(std::move(t));
      }
      current_ = &call;
      firstError_ = nullptr;
      pending_ = workers - 1;
      ++generation_;
    }
    poolCv_.notify_all();
    std::exception_ptr mine;
    try {
      runWorker(call, 0);
    } catch (...) {
      mine = std::current_exception();
      // Release this rank's other workers (and peers) from waits that can no longer finish.
      poisonWith(mine);
    }
    std::unique_lock<std::mutex> g(poolMu_);
    // Worker 0's own waits run the program's signal handlers (checkInterrupt); so must this wait,
    // or a Ctrl-C while only another worker is blocked on a peer would wait out FORESTCC_TIMEOUT.
    // An interrupt poisons the call, which releases the other workers.
    while (!doneCv_.wait_for(g, std::chrono::milliseconds(50), [&] { return pending_ == 0; })) {
      if (mine) continue;
      g.unlock();
      try {
        checkInterrupt();
      } catch (...) {
        mine = std::current_exception();
        poisonWith(mine);
      }
      g.lock();
    }
    current_ = nullptr;
    if (!mine && firstError_) {
      mine = firstError_;
      poisonWith(mine);
    }
    if (mine && poisonedElsewhere(mine)) s.raisePoisoned(callName(), -1);
    if (mine) std::rethrow_exception(mine);
  }
  if (call.bank >= 0) checkEagerPeers(call);
  // A peer that failed in this call poisoned the communicator before it left it; what this rank
  // read from that peer's memory afterwards may be stale, so the call must not return as a success.
  // (A poison from a later call, by a peer already past this one, does not concern this call.)
  if (s.poisoned() && (s.poisonedCall() == 0 || s.poisonedCall() <= call.sequence)) s.raisePoisoned(callName(), -1);
  leave.failed = false;
  if (buffers.op == ReduceOp::Avg) {
    // Every rank holds a result, except in reduce, where only the root does.
    const bool reduced = plan::reduces(p.collective) && (p.collective != plan::Collective::Reduce || s.rank == p.root);
    if (reduced) divideElements(buffers.output, g.count, buffers.dtype, p.nranks);
  }
}

void Executor::runWorker(Call& call, int worker) {
  const std::vector<plan::Op>& ops = call.plan->workers[worker];
  CpuBackend backend{*this, call, worker, nullptr};
  Interpreter<CpuBackend> interpreter(call.geometry, backend);
  Failure f = interpreter.run(ops.data(), static_cast<uint32_t>(ops.size()));
  if (f.kind == FailureKind::None) {
    try {
      for (Connection* link : call.plan->workerLinks[worker]) link->flush();
    } catch (...) {
      backend.error = std::current_exception();
      f.kind = FailureKind::Backend;
      f.step = ops.empty() ? 0 : static_cast<uint32_t>(ops.size() - 1);  // the flush after the last op
    }
  }
  if (f.kind != FailureKind::None) raiseFailure(call, worker, f, backend.error);
}

}  // namespace forestcc::executor
