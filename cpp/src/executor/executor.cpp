#include "executor/executor.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "executor/copy_kernels.hpp"
#include "executor/plan_checks.hpp"
#include "executor/reduce_kernels.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "transport/remote_memory.hpp"

namespace forestcc::executor {

using plan::Buffer;
using plan::OpCode;

uint64_t segmentIdOf(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h | 1;  // never 0, which means "not in a segment"
}

// ---- the state of one call --------------------------------------------------------------

struct Executor::Call {
  const CompiledPlan* plan = nullptr;
  const CallBuffers* buffers = nullptr;
  uint64_t sequence = 0;
  size_t elem = 1;
  uint64_t count = 0;  // c
  uint32_t k = 1;
  uint32_t slices = 1;
  char* local[3] = {nullptr, nullptr, nullptr};
  uint64_t localBytes[3] = {0, 0, 0};
  bool variable = false;  // all_to_all_v block layout
  bool streaming = false;  // copy with streaming stores (large calls, copy_kernels.hpp)
  int bank = -1;           // eager plans: the scratch bank of this call (every rank agrees)
  CallStamp stamp{};       // what this rank says the call is (control_block.hpp)
  const uint64_t* localOffsets[2] = {nullptr, nullptr};
};

struct Executor::WorkerThread {
  std::thread thread;
  uint64_t seen = 0;
};

namespace {

struct Range {
  uint64_t begin, end;  // elements
};

// get_reduce reads unmapped peer memory (cross-process reads) in tiles this large, so the tile
// is still in L2 when it is reduced.
constexpr uint64_t kBounceBytes = 256 << 10;

// Chunk `index` of a buffer, slice `slice` of `slices` (schedules/README.md, "Buffers and chunks"
// and "Pipelining"). `offsets` is non-null for all_to_all_v blocks.
inline Range chunkRange(uint64_t index, uint64_t c, uint32_t k, const uint64_t* offsets, uint32_t slice,
                        uint32_t slices) {
  const uint64_t block = index / k, part = index % k;
  uint64_t base, len;
  if (offsets) {
    base = offsets[block];
    len = offsets[block + 1] - base;
  } else {
    base = block * c;
    len = c;
  }
  const uint64_t lo = base + part * len / k, hi = base + (part + 1) * len / k;
  const uint64_t n = hi - lo;
  return {lo + slice * n / slices, lo + (uint64_t(slice) + 1) * n / slices};
}

std::string stepName(const CompiledPlan& p, int worker, size_t step, const plan::Op& op, uint32_t slice) {
  std::ostringstream o;
  o << "plan '" << p.name << "' worker " << worker << " step " << step << " (" << plan::name(op.code);
  if (op.code != OpCode::Copy && op.code != OpCode::Reduce) o << " on channel " << op.channel;
  o << ", slice " << slice << ")";
  return o.str();
}

// Stamps are written and read as a seqlock: a reader that raced with the owner rewriting the slot
// (the owner is two calls further) sees the sequence change and does not trust what it read.
void writeStamp(CallStamp& slot, const CallStamp& stamp) {
  __atomic_store_n(&slot.sequence, 0, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(reinterpret_cast<char*>(&slot) + sizeof slot.sequence,
              reinterpret_cast<const char*>(&stamp) + sizeof stamp.sequence, sizeof stamp - sizeof stamp.sequence);
  __atomic_store_n(&slot.sequence, stamp.sequence, __ATOMIC_RELEASE);
}

// False when the slot changed while being read. Sequence 0: never written (or being rewritten,
// which a reader cannot tell apart: either way not this call's stamp).
bool readStamp(const CallStamp& slot, CallStamp& out) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t before = __atomic_load_n(&slot.sequence, __ATOMIC_ACQUIRE);
    std::memcpy(&out, &slot, sizeof out);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t after = __atomic_load_n(&slot.sequence, __ATOMIC_RELAXED);
    out.sequence = before;
    if (before == after) return true;
  }
  return false;
}

bool sameCall(const CallStamp& a, const CallStamp& b) {
  return a.sequence == b.sequence && a.planHash == b.planHash && a.count == b.count && a.root == b.root &&
         a.collective == b.collective && a.dtype == b.dtype && a.op == b.op && a.variable == b.variable;
}

bool reduces(plan::Collective c) {
  return c == plan::Collective::AllReduce || c == plan::Collective::ReduceScatter || c == plan::Collective::Reduce;
}

// "all_reduce(count=1000, dtype=float32, op=sum, plan=forestcc.builtin.direct#3f2a...)".
std::string describeCall(const CallStamp& st) {
  const auto c = static_cast<plan::Collective>(st.collective);
  std::ostringstream o;
  o << (st.variable ? "all_to_all_v" : plan::name(c)) << "(";
  if (c != plan::Collective::Barrier) {
    if (!st.variable) o << "count=" << st.count << ", ";
    o << "dtype=" << name(static_cast<DataType>(st.dtype)) << ", ";
  }
  if (reduces(c)) o << "op=" << name(static_cast<ReduceOp>(st.op)) << ", ";
  if (plan::rooted(c)) o << "root=" << st.root << ", ";
  o << "plan=" << std::string(st.family, strnlen(st.family, kPlanFamilyChars)) << "#" << std::hex
    << (st.planHash >> 32) << ")";
  return o.str();
}

}  // namespace

std::string Where::describe() const {
  return plan ? stepName(*plan, worker, step, *op, slice) : std::string(text);
}

// ---- construction and compilation ----------------------------------------------------------

Executor::Executor(std::shared_ptr<Communicator::State> state)
    : state_(std::move(state)),
      streamingBytes_(static_cast<uint64_t>(config::streamingBytes())),
      debug_(config::debug()) {
  expected_.assign(static_cast<size_t>(kMaxLocalRanks) * kMaxPlanChannelsPerPeer, 0);
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
  auto localIndex = [&](int r) {
    auto it = std::find(s.localRanks.begin(), s.localRanks.end(), r);
    return static_cast<int>(it - s.localRanks.begin());
  };
  const int me = localIndex(s.rank);
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
    if (mine.channels[c].transport == plan::Transport::Tcp || mine.channels[c].transport == plan::Transport::CudaIpc ||
        s.nodeOf[peer] != s.nodeOf[s.rank])
      throw Error(ErrorCode::InvalidUsage,
                  where + "needs a " + (s.nodeOf[peer] != s.nodeOf[s.rank] ? std::string("cross-node (tcp)")
                                                                            : std::string(plan::name(mine.channels[c].transport))) +
                      " channel; this version executes plans over shared memory between ranks of one node only",
                  s.rank, peer);
    const int li = localIndex(peer);
    if (li >= kMaxLocalRanks || me >= kMaxLocalRanks)
      throw Error(ErrorCode::InvalidUsage, where + "plans support at most " + std::to_string(kMaxLocalRanks) +
                                               " ranks per node", s.rank, peer);
    ExecChannel ch;
    ch.peer = peer;
    if (peer == s.rank) {
      const int m = loopbacks++;
      if (m >= kMaxPlanChannelsPerPeer)
        throw Error(ErrorCode::InvalidUsage, where + "too many loopback channels (limit " +
                                                 std::to_string(kMaxPlanChannelsPerPeer) + ")", s.rank);
      ch.inbound = &s.control->planSlots[me][m].value;
      ch.outbound = &s.control->planSlots[me][m ^ 1].value;
      ch.expected = &expected_[static_cast<size_t>(me) * kMaxPlanChannelsPerPeer + m];
    } else {
      const int i = pairIndex[peer]++;
      if (i >= kMaxPlanChannelsPerPeer)
        throw Error(ErrorCode::InvalidUsage, where + "too many channels to one peer (limit " +
                                                 std::to_string(kMaxPlanChannelsPerPeer) + ")", s.rank, peer);
      ch.inbound = &s.control->planSlots[li][i].value;
      ch.outbound = &s.peerControl(peer)->planSlots[me][i].value;
      ch.expected = &expected_[static_cast<size_t>(li) * kMaxPlanChannelsPerPeer + i];
    }
    ch.peerBlock = s.peerControl(peer);
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
  }
  // Eager plans rely on every rank hearing from every other in each call (schedules/README.md,
  // "Scratch banks"; the verifier proves it). Cheap to check here, for plans not proven before
  // they run (plan dicts, files too large to prove): a direct wait on every peer (which the
  // built-in eager plans have).
  if (p.scratchBanks == 2)
    for (int r = 0; r < p.nranks; ++r)
      if (r != s.rank && !waitsOn[r])
        throw Error(ErrorCode::InvalidUsage,
                    prefix + "has scratch banks (an eager plan) but rank " + std::to_string(s.rank) +
                        " never waits on rank " + std::to_string(r) +
                        ": an eager plan must wait on every other rank in every call",
                    s.rank, r);
  // After this rank's own checks, which name the op or the peer more precisely.
  checkSignalBalance(p, s.rank);
  return out;
}

// ---- memory of the call --------------------------------------------------------------------

void Executor::ensureScratch(uint64_t bytes) {
  if (scratch_ && scratch_->size() >= bytes) return;
  // Grow by doubling so a sweep over sizes reallocates a few times, not every call. Peers keep
  // their mapping of the old segment until they drop it; its name is unlinked now.
  uint64_t size = scratch_ ? scratch_->size() : (1u << 20);
  while (size < bytes) size *= 2;
  scratch_ = ShmSegment::create(size, "scratch");
}

static void describe(BufferDescriptor& d, void* data, uint64_t bytes) {
  d.address = reinterpret_cast<uint64_t>(data);
  d.bytes = bytes;
  size_t offset = 0;
  std::shared_ptr<ShmSegment> seg = bytes ? findSharedAllocation(data, bytes, &offset) : nullptr;
  if (seg) {
    d.segmentId = segmentIdOf(seg->name());
    d.segmentSize = seg->size();
    d.offset = offset;
    std::snprintf(d.segmentName, sizeof d.segmentName, "%s", seg->name().c_str());
  } else {
    d.segmentId = 0;
  }
}

void Executor::publish(Call& call) {
  CallMailbox& mb = state_->control->mailbox;
  const uint64_t generation = sharedAllocationGeneration();
  for (int b = 0; b < 2; ++b) {
    Published& last = published_[b];
    const uint64_t address = reinterpret_cast<uint64_t>(call.local[b]);
    if (last.generation == generation && last.address == address && last.bytes == call.localBytes[b]) continue;
    describe(mb.buffers[b], call.local[b], call.localBytes[b]);
    last = {address, call.localBytes[b], generation};
  }
  BufferDescriptor& sd = mb.buffers[2];
  sd.address = reinterpret_cast<uint64_t>(call.local[2]);
  sd.bytes = call.localBytes[2];
  if (scratch_.get() != publishedScratch_) {
    if (scratch_) {
      sd.segmentId = segmentIdOf(scratch_->name());
      sd.segmentSize = scratch_->size();
      sd.offset = 0;
      std::snprintf(sd.segmentName, sizeof sd.segmentName, "%s", scratch_->name().c_str());
    } else {
      sd.segmentId = 0;
    }
    publishedScratch_ = scratch_.get();
  }
  if (call.variable)
    for (int b = 0; b < 2; ++b)
      std::memcpy(mb.blockOffsets[b], call.localOffsets[b], sizeof(uint64_t) * (call.plan->nranks + 1));
  writeStamp(mb.byCall[call.sequence % kStampHistory], call.stamp);
  if (call.bank >= 0) writeStamp(mb.byEagerCall[call.bank], call.stamp);
  // The rest are plain stores, published by the first signal of this call (a release). The
  // sequence is a release store too: a peer that reads it past this call knows every signal this
  // rank sent in earlier calls has landed (watchPeer relies on it).
  __atomic_store_n(&mb.sequence, call.sequence, __ATOMIC_RELEASE);
}

char* Executor::mapSegment(const BufferDescriptor& d, int peer) {
  std::lock_guard<std::mutex> g(segmentsMu_);
  auto it = segments_.find(d.segmentId);
  if (it == segments_.end()) {
    // A new segment: first let go of those whose owners released them (unlinked names are never
    // published again), or every buffer a peer ever allocated would stay mapped, and resident.
    for (auto old = segments_.begin(); old != segments_.end();)
      old = old->second->linked() ? std::next(old) : segments_.erase(old);
    it = segments_.emplace(d.segmentId, ShmSegment::open(d.segmentName, d.segmentSize, state_->rank, peer)).first;
  }
  return static_cast<char*>(it->second->data());
}

const PeerView& Executor::peerView(Call& call, int worker, int peer) {
  PeerView& v = views_[worker][peer];
  if (v.sequence == call.sequence) return v;
  const CallMailbox& mb = state_->peerControl(peer)->mailbox;
  const uint64_t theirs = __atomic_load_n(&mb.sequence, __ATOMIC_ACQUIRE);
  if (theirs != call.sequence)
    throw Error(ErrorCode::Internal,
                rankPrefix(state_->rank) + "plan '" + call.plan->name + "' reaches rank " + std::to_string(peer) +
                    "'s memory before that rank entered this call (it is at collective #" + std::to_string(theirs) +
                    ", this rank at #" + std::to_string(call.sequence) +
                    "): the plan breaks the entry rule, or the ranks call collectives in different orders",
                state_->rank, peer);
  checkStamp(call, peer, mb.byCall[call.sequence % kStampHistory], Where{nullptr, 0, 0, nullptr, 0, "before touching its memory"});
  v.checked = call.sequence;
  for (int b = 0; b < 3; ++b) {
    const BufferDescriptor& d = mb.buffers[b];
    RemoteBuffer& rb = v.buffers[b];
    if (d.segmentId) {
      if (rb.segmentId != d.segmentId) {
        rb.segmentBase = mapSegment(d, peer);
        rb.segmentId = d.segmentId;
      }
      rb.mapped = rb.segmentBase + d.offset;
    } else {
      rb.mapped = nullptr;
      rb.address = d.address;
    }
    rb.bytes = d.bytes;
  }
  v.blockOffsets[0] = mb.blockOffsets[0];
  v.blockOffsets[1] = mb.blockOffsets[1];
  v.sequence = call.sequence;
  return v;
}

void Executor::checkStamp(const Call& call, int peer, const CallStamp& slot, const Where& where) {
  CallStamp theirs;
  const bool read = readStamp(slot, theirs);
  const CallStamp& mine = call.stamp;
  if (read && sameCall(theirs, mine)) return;
  std::string what;
  const std::string them = "rank " + std::to_string(peer);
  if (!read || theirs.sequence > mine.sequence) {
    what = them + " is already past this call (" + (read ? "at collective #" + std::to_string(theirs.sequence)
                                                         : std::string("two or more calls ahead")) +
           "): the ranks call collectives in different orders or numbers";
  } else if (theirs.sequence < mine.sequence) {
    what = them + " has not entered this call (it is at collective #" + std::to_string(theirs.sequence) +
           ") but its signal arrived: an earlier call left a signal behind, or the ranks call collectives in "
           "different orders";
  } else {
    what = them + " called " + describeCall(theirs) + " where this rank called " + describeCall(mine);
    const bool sameArguments = theirs.collective == mine.collective && theirs.variable == mine.variable &&
                               theirs.root == mine.root && theirs.dtype == mine.dtype && theirs.op == mine.op &&
                               theirs.count == mine.count;
    if (sameArguments)
      what += ": the ranks chose different algorithms or plans. algo=\"auto\" decides by each rank's buffers "
              "(forestcc.empty or ordinary memory, in place or not): give every rank the same kind and placement, "
              "or name the algorithm";
    else if (theirs.collective == mine.collective && theirs.variable == mine.variable && theirs.root == mine.root &&
             theirs.op == mine.op)
      what += " (do the ranks' counts and dtypes agree?)";
  }
  std::string message = rankPrefix(state_->rank) + "collective #" + std::to_string(mine.sequence) + " (" +
                        describeCall(mine) + "): " + what + " [" + where.describe() + "]";
  if (debug_) message += "\n" + stampTable(call);
  // The ranks' calls disagree from here on: waits would only run into the timeout.
  state_->poison(message, ErrorCode::Mismatch, mine.sequence);
  throw Error(ErrorCode::Mismatch, message, state_->rank, peer);
}

std::string Executor::stampTable(const Call& call) {
  Communicator::State& s = *state_;
  std::ostringstream o;
  o << "FORESTCC_DEBUG: collective #" << call.sequence << " on each rank of this node:";
  for (int r : s.localRanks) {
    CallStamp st;
    const bool read = readStamp(s.peerControl(r)->mailbox.byCall[call.sequence % kStampHistory], st);
    o << "\n  rank " << r << ": ";
    if (read && st.sequence == call.sequence) o << describeCall(st);
    else o << "not in this call (at collective #" << __atomic_load_n(&s.peerControl(r)->mailbox.sequence, __ATOMIC_ACQUIRE) << ")";
  }
  return o.str();
}

void Executor::awaitStampWindow(uint64_t sequence) {
  Communicator::State& s = *state_;
  const uint64_t floor = sequence - kStampWindow;
  for (int r : s.localRanks) {
    if (r == s.rank) continue;
    const uint64_t* at = &s.peerControl(r)->mailbox.sequence;
    auto ready = [&] { return __atomic_load_n(at, __ATOMIC_ACQUIRE) >= floor; };
    const WaitOutcome outcome = waitUntil(ready, s.waitPolicy(r, s.timeout));
    if (outcome != WaitOutcome::Ready)
      s.raiseWaitFailure(outcome, r,
                         "collective #" + std::to_string(sequence) + ": waiting for rank " + std::to_string(r) +
                             " to enter collective #" + std::to_string(floor) + " (a rank runs at most " +
                             std::to_string(kStampWindow) + " calls ahead)",
                         s.timeout);
  }
}

void Executor::confirmPeer(Call& call, int worker, const ExecChannel& ch, const Where& where) {
  PeerView& v = views_[worker][ch.peer];
  if (v.checked == call.sequence) return;
  checkStamp(call, ch.peer, ch.peerBlock->mailbox.byCall[call.sequence % kStampHistory], where);
  v.checked = call.sequence;
}

template <class Ready>
void Executor::watchPeer(const Call& call, int peer, Ready& ready, const Where& where) {
  const CallMailbox& mb = state_->peerControl(peer)->mailbox;
  const uint64_t at = __atomic_load_n(&mb.sequence, __ATOMIC_ACQUIRE);
  if (at < call.sequence) return;  // not there yet: keep waiting
  if (at == call.sequence) {
    checkStamp(call, peer, mb.byCall[call.sequence % kStampHistory], where);
    return;
  }
  // It left this call; everything it sent in it has landed (its sequence is a release store).
  if (ready()) return;
  checkStamp(call, peer, mb.byCall[call.sequence % kStampHistory], where);
  const std::string message = rankPrefix(state_->rank) + "collective #" + std::to_string(call.sequence) + " (" +
                              describeCall(call.stamp) + "): rank " + std::to_string(peer) +
                              " made the same call but finished it without the signal this rank waits for [" +
                              where.describe() + "]: the plan's signals do not balance";
  state_->poison(message, ErrorCode::Mismatch, call.sequence);
  throw Error(ErrorCode::Mismatch, message, state_->rank, peer);
}

void Executor::checkEagerPeers(const Call& call) {
  static const Where kEagerEnd{nullptr, 0, 0, nullptr, 0, "at the end of an eager call"};
  // Every peer's stamp of this call is visible here: the plan waited for an event of each
  // peer in this call (the verifier's rule for eager plans), which it made after publishing; and
  // no peer can have stamped the next eager call but one over it before this rank starts the next.
  Communicator::State& s = *state_;
  for (const ExecChannel& ch : call.plan->channels)
    if (ch.peer != s.rank) {
      // The bank's stamp says that what the peer wrote into this rank's bank is of this call (one
      // cache line to read per peer). When it differs, its stamp of this call says what it ran
      // instead (another algorithm, say), for the message.
      CallStamp bank;
      if (readStamp(ch.peerBlock->mailbox.byEagerCall[call.bank], bank) && sameCall(bank, call.stamp)) continue;
      checkStamp(call, ch.peer, ch.peerBlock->mailbox.byCall[call.sequence % kStampHistory],
                 kEagerEnd);
      checkStamp(call, ch.peer, ch.peerBlock->mailbox.byEagerCall[call.bank], kEagerEnd);
    }
}

// ---- running ---------------------------------------------------------------------------------

void Executor::run(const CompiledPlan& p, const CallBuffers& buffers) {
  Communicator::State& s = *state_;
  if (s.poisoned()) {
    // A peer already found this very call mismatched: this rank's part of it raises the same.
    const bool thisCall = s.poisonedCode() == ErrorCode::Mismatch && s.poisonedCall() == sequence_ + 1;
    throw Error(thisCall ? ErrorCode::Mismatch : ErrorCode::Aborted,
                rankPrefix(s.rank) + "the communicator was poisoned; " + s.abortReason(), s.rank);
  }
  Call call;
  call.plan = &p;
  call.buffers = &buffers;
  call.elem = elementSize(buffers.dtype);
  call.count = buffers.count;
  call.k = p.chunksPerBlock;
  call.variable = !buffers.inCounts.empty();
  std::vector<uint64_t> offsets[2];
  if (call.variable) {
    if (p.scratchChunks)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "plan '" + p.name +
                                               "' uses scratch; all_to_all_v needs a plan without scratch "
                                               "(algo 'direct' or 'pairwise')", s.rank);
    if (p.nranks > kMaxVariableBlocks)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "all_to_all_v supports at most " +
                                               std::to_string(kMaxVariableBlocks) + " ranks", s.rank);
    const std::vector<uint64_t>* counts[2] = {&buffers.inCounts, &buffers.outCounts};
    for (int b = 0; b < 2; ++b) {
      offsets[b].assign(p.nranks + 1, 0);
      for (int r = 0; r < p.nranks; ++r) offsets[b][r + 1] = offsets[b][r] + (*counts[b])[r];
      call.localOffsets[b] = offsets[b].data();
    }
    call.slices = 1;
  } else if (p.minSliceBytes == 0) {
    call.slices = p.maxSlices;
  } else {
    const uint64_t chunkBytes = (call.count / call.k) * call.elem;
    call.slices = static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(p.maxSlices, chunkBytes / p.minSliceBytes)));
  }
  const uint64_t blockBytes = call.count * call.elem;
  const uint64_t scratchBytes = (p.scratchChunks + call.k - 1) / call.k * blockBytes;
  // Before this call takes its number and bank: a wait that fails here (a timeout, Ctrl-C)
  // leaves the communicator as it was, and a retried call waits here again.
  if ((sequence_ + 1) % kStampWindow == 0) awaitStampWindow(sequence_ + 1);
  if (p.scratchBanks == 2) {
    // Checked before anything is published: every rank has the same count and fails alike.
    if (scratchBytes > kScratchBankBytes)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(s.rank) + "plan '" + p.name + "' is eager (scratch banks): this call needs " +
                      std::to_string(scratchBytes) + " bytes of scratch but a bank holds " +
                      std::to_string(kScratchBankBytes) + "; use it for smaller messages, or another algorithm",
                  s.rank);
    call.bank = static_cast<int>(eagerCalls_++ & 1);
    call.local[2] = s.control->scratchBanks.bank[call.bank];
  } else {
    if (scratchBytes) ensureScratch(scratchBytes);
    call.local[2] = scratchBytes ? static_cast<char*>(scratch_->data()) : nullptr;
  }
  call.local[0] = static_cast<char*>(buffers.input);
  call.local[1] = static_cast<char*>(buffers.output);
  call.localBytes[0] = buffers.inputBytes;
  call.localBytes[1] = buffers.outputBytes;
  call.localBytes[2] = scratchBytes;
  // Streaming stores pay off once the node's data of the call cannot stay in the cache: every
  // local rank's input and output (one buffer in place). Below that they push data to memory
  // that the next op, or the peer, would have found in cache.
  const uint64_t own = p.inPlace ? std::max(buffers.inputBytes, buffers.outputBytes) : buffers.inputBytes + buffers.outputBytes;
  call.streaming = own * s.localRanks.size() >= streamingBytes_;
  call.sequence = ++sequence_;
  CallStamp& st = call.stamp;
  st = p.stamp;
  st.sequence = call.sequence;
  st.count = call.count;
  // Only what the call uses: a barrier has no data, only reductions have an operator.
  st.dtype = p.collective == plan::Collective::Barrier ? 0 : static_cast<uint8_t>(buffers.dtype);
  st.op = reduces(p.collective) ? static_cast<uint8_t>(buffers.op) : 0;
  st.variable = call.variable;

  const int workers = static_cast<int>(p.workers.size());
  if (static_cast<int>(views_.size()) < std::max(workers, 1)) {
    views_.resize(std::max(workers, 1), std::vector<PeerView>(s.size));
    bounce_.resize(views_.size());
  }
  publish(call);
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
    const uint32_t by = s.control->header.abortBy.load(std::memory_order_acquire);
    if (by == 0 || static_cast<int>(by) - 1 == s.rank) return false;
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      return e.code() != ErrorCode::Interrupted;
    } catch (...) {
    }
    return true;
  };
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
            Call* c = current_;
            if (index >= static_cast<int>(c->plan->workers.size())) continue;
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
    doneCv_.wait(g, [&] { return pending_ == 0; });
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
  if (buffers.op == ReduceOp::Avg) {
    const bool reduced = p.collective == plan::Collective::AllReduce || p.collective == plan::Collective::ReduceScatter ||
                         (p.collective == plan::Collective::Reduce && s.rank == p.root);
    if (reduced) divideElements(buffers.output, call.count, buffers.dtype, p.nranks);
  }
}

void Executor::runWorker(Call& call, int worker) {
  Communicator::State& s = *state_;
  const CompiledPlan& p = *call.plan;
  const std::vector<plan::Op>& ops = p.workers[worker];
  const size_t elem = call.elem;
  const uint64_t c = call.count;
  const uint32_t k = call.k, slices = call.slices;
  const DataType dtype = call.buffers->dtype;
  const ReduceOp rop = call.buffers->op;

  auto localOffsets = [&](Buffer b) -> const uint64_t* {
    return call.variable && b != Buffer::Scratch ? call.localOffsets[static_cast<int>(b)] : nullptr;
  };
  // Byte range [begin, end) of n chunks from ref, piece j (one piece per chunk when sliced, one
  // span otherwise), checked against the size of the buffer it lies in: this rank's (peer -1)
  // or a peer's.
  auto byteRange = [&](const plan::ChunkRef& ref, uint32_t j, uint32_t n, uint32_t slice, const uint64_t* offsets,
                       uint64_t size, int peer) -> Range {
    Range first = chunkRange(ref.index + j, c, k, offsets, slice, slices);
    Range last = n > 1 ? chunkRange(ref.index + j + n - 1, c, k, offsets, slice, slices) : first;
    const Range bytes{first.begin * elem, last.end * elem};
    if (bytes.end > size) {
      const std::string owner = peer < 0 ? std::string("the ") : "rank " + std::to_string(peer) + "'s ";
      const std::string what = ref.buffer == Buffer::Scratch && call.bank >= 0
                                   ? std::string("scratch bank")
                                   : std::string(plan::name(ref.buffer)) + " buffer";
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "plan '" + p.name + "' touches bytes [" +
                                               std::to_string(bytes.begin) + ", " + std::to_string(bytes.end) +
                                               ") of " + owner + what + ", which has " + std::to_string(size) + " bytes",
                  s.rank, peer);
    }
    return bytes;
  };
  auto localSpan = [&](const plan::ChunkRef& ref, uint32_t j, uint32_t n, uint32_t slice, uint64_t& bytes) -> char* {
    const int b = static_cast<int>(ref.buffer);
    const Range r = byteRange(ref, j, n, slice, localOffsets(ref.buffer), call.localBytes[b], -1);
    bytes = r.end - r.begin;
    return call.local[b] + r.begin;
  };
  struct RemoteSpan {
    char* mapped;
    uint64_t address;
    uint64_t bytes;
  };
  auto remoteSpan = [&](const ExecChannel& ch, const plan::ChunkRef& ref, uint32_t j, uint32_t n,
                        uint32_t slice) -> RemoteSpan {
    const int peer = ch.peer;
    if (peer == s.rank) {
      uint64_t bytes;
      char* ptr = localSpan(ref, j, n, slice, bytes);
      return {ptr, 0, bytes};
    }
    if (ref.buffer == Buffer::Scratch && call.bank >= 0) {
      // The peer's bank is mapped since the communicator was made, and has this call's size
      // (same plan, same count); the peer need not have entered the call (eager plans).
      const Range r = byteRange(ref, j, n, slice, nullptr, call.localBytes[2], peer);
      return {ch.peerBlock->scratchBanks.bank[call.bank] + r.begin, 0, r.end - r.begin};
    }
    const PeerView& v = peerView(call, worker, peer);
    const int b = static_cast<int>(ref.buffer);
    const uint64_t* off = call.variable && ref.buffer != Buffer::Scratch ? v.blockOffsets[b] : nullptr;
    const RemoteBuffer& rb = v.buffers[b];
    const Range r = byteRange(ref, j, n, slice, off, rb.bytes, peer);
    if (rb.mapped) return {rb.mapped + r.begin, 0, r.end - r.begin};
    return {nullptr, rb.address + r.begin, r.end - r.begin};
  };
  // A peer's span that is not mapped here: reached with process_vm_readv/writev.
  auto unmapped = [&](int peer, const RemoteSpan& there) {
    return RemoteMemory::inProcess(s.peers[peer].pid, there.address, there.bytes, s.rank, peer);
  };
  auto mismatch = [&](int peer, uint64_t mine, uint64_t theirs, const char* what) {
    throw Error(ErrorCode::Mismatch,
                rankPrefix(s.rank) + "plan '" + p.name + "': " + what + " " + std::to_string(mine / elem) +
                    " elements but rank " + std::to_string(peer) + "'s side has " + std::to_string(theirs / elem) +
                    " (do the ranks' counts or splits agree?)", s.rank, peer);
  };
  auto transfer = [&](const plan::Op& op, const plan::ChunkRef& localRef, const plan::ChunkRef& remoteRef, bool write,
                      uint32_t slice) {
    const int peer = p.channels[op.channel].peer;
    const uint32_t pieces = slices == 1 ? 1 : op.count;
    const uint32_t span = slices == 1 ? op.count : 1;
    for (uint32_t j = 0; j < pieces; ++j) {
      uint64_t bytes;
      char* here = localSpan(localRef, j, span, slice, bytes);
      RemoteSpan there = remoteSpan(p.channels[op.channel], remoteRef, j, span, slice);
      if (there.bytes != bytes) mismatch(peer, bytes, there.bytes, write ? "sends" : "receives");
      if (!bytes) continue;
      if (there.mapped) {
        if (write) copyBytes(there.mapped, here, bytes, call.streaming);
        else copyBytes(here, there.mapped, bytes, call.streaming);
      } else {
        const RemoteMemory rm = unmapped(peer, there);
        if (write) rm.write(0, here, bytes);
        else rm.read(0, here, bytes);
      }
    }
  };
  // The local destination and sources of a reduce op's piece j; `bytes` is its length.
  auto reduceSpans = [&](const plan::Op& op, uint32_t j, uint32_t span, uint32_t slice, const void** srcs,
                         uint64_t& bytes) -> char* {
    char* dst = localSpan(op.dst, j, span, slice, bytes);
    for (int i = 0; i < op.sourceCount; ++i) {
      uint64_t srcBytes;
      srcs[i] = localSpan(op.sources[i], j, span, slice, srcBytes);
      if (srcBytes != bytes)
        throw Error(ErrorCode::Internal, rankPrefix(s.rank) + "plan '" + p.name + "': reduce of unequal chunks", s.rank);
    }
    return dst;
  };
  auto reduce = [&](const plan::Op& op, uint32_t slice) {
    const uint32_t pieces = slices == 1 ? 1 : op.count;
    const uint32_t span = slices == 1 ? op.count : 1;
    const void* srcs[plan::kMaxReduceSources];
    for (uint32_t j = 0; j < pieces; ++j) {
      uint64_t bytes;
      char* dst = reduceSpans(op, j, span, slice, srcs, bytes);
      reduceElements(dst, srcs, op.sourceCount, bytes / elem, dtype, rop);
    }
  };
  // dst = op(local sources..., the peer's src), one pass: a mapped peer buffer is read in place;
  // unmapped memory comes over in L2-sized tiles (cross-process reads) that are reduced at once.
  auto getReduce = [&](const plan::Op& op, uint32_t slice) {
    const int peer = p.channels[op.channel].peer;
    const uint32_t pieces = slices == 1 ? 1 : op.count;
    const uint32_t span = slices == 1 ? op.count : 1;
    const int n = op.sourceCount + 1;
    const void* srcs[plan::kMaxReduceSources];
    for (uint32_t j = 0; j < pieces; ++j) {
      uint64_t bytes;
      char* dst = reduceSpans(op, j, span, slice, srcs, bytes);
      const RemoteSpan there = remoteSpan(p.channels[op.channel], op.src, j, span, slice);
      if (there.bytes != bytes) mismatch(peer, bytes, there.bytes, "reduces");
      if (!bytes) continue;
      if (there.mapped) {
        srcs[n - 1] = there.mapped;
        reduceElements(dst, srcs, n, bytes / elem, dtype, rop);
        continue;
      }
      std::vector<char>& bounce = bounce_[worker];
      const uint64_t tile = std::max<uint64_t>(1, kBounceBytes / elem) * elem;
      if (bounce.size() < tile) bounce.resize(tile);
      const RemoteMemory rm = unmapped(peer, there);
      const void* tileSrcs[plan::kMaxReduceSources];
      for (uint64_t off = 0; off < bytes; off += tile) {
        const uint64_t len = std::min(tile, bytes - off);
        rm.read(off, bounce.data(), len);
        for (int i = 0; i < op.sourceCount; ++i) tileSrcs[i] = static_cast<const char*>(srcs[i]) + off;
        tileSrcs[n - 1] = bounce.data();
        reduceElements(dst + off, tileSrcs, n, len / elem, dtype, rop);
      }
    }
  };
  auto signal = [&](const plan::Op& op) {
    __atomic_fetch_add(p.channels[op.channel].outbound, 1, __ATOMIC_RELEASE);
  };
  auto wait = [&](const plan::Op& op, size_t step, uint32_t slice) {
    const ExecChannel& ch = p.channels[op.channel];
    const uint64_t want = *ch.expected + 1;
    auto ready = [&] { return __atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE) >= want; };
    const bool remote = ch.peer != s.rank;
    if (!ready()) {
      WaitPolicy policy = s.waitPolicy(ch.peer, s.timeout);
      auto watch = [&] {
        if (remote) watchPeer(call, ch.peer, ready, Where{&p, worker, step, &op, slice});
      };
      WaitOutcome outcome = waitUntil(ready, policy, watch);
      if (outcome != WaitOutcome::Ready)
        s.raiseWaitFailure(outcome, ch.peer,
                           stepName(p, worker, step, op, slice) + " for rank " + std::to_string(ch.peer), s.timeout);
    }
    *ch.expected = want;
    // The signal came from a peer in this call: its stamp must be this rank's before anything it
    // sent is used (eager calls compare theirs at the end, from their banks' stamps).
    if (remote && call.bank < 0 && views_[worker][ch.peer].checked != call.sequence)
      confirmPeer(call, worker, ch, Where{&p, worker, step, &op, slice});
  };

  for (uint32_t slice = 0; slice < slices; ++slice) {
    for (size_t step = 0; step < ops.size(); ++step) {
      const plan::Op& op = ops[step];
      try {
        switch (op.code) {
          case OpCode::Put: transfer(op, op.src, op.dst, true, slice); break;
          case OpCode::Get: transfer(op, op.dst, op.src, false, slice); break;
          case OpCode::PutSignal: transfer(op, op.src, op.dst, true, slice); signal(op); break;
          case OpCode::Signal: signal(op); break;
          case OpCode::Wait: wait(op, step, slice); break;
          case OpCode::Flush: std::atomic_thread_fence(std::memory_order_release); break;
          case OpCode::Copy: {
            const uint32_t pieces = slices == 1 ? 1 : op.count;
            const uint32_t span = slices == 1 ? op.count : 1;
            for (uint32_t j = 0; j < pieces; ++j) {
              uint64_t bytes, srcBytes;
              char* dst = localSpan(op.dst, j, span, slice, bytes);
              char* src = localSpan(op.src, j, span, slice, srcBytes);
              const uint64_t n = std::min(bytes, srcBytes);
              if (!n || dst == src) continue;
              if (dst + n <= src || src + n <= dst) copyBytes(dst, src, n, call.streaming);
              else std::memmove(dst, src, n);
            }
            break;
          }
          case OpCode::Reduce: reduce(op, slice); break;
          case OpCode::ReducePut: reduce(op, slice); transfer(op, op.dst, op.remote, true, slice); break;
          case OpCode::GetReduce: getReduce(op, slice); break;
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Timeout || e.code() == ErrorCode::Remote || e.code() == ErrorCode::Aborted ||
            e.code() == ErrorCode::Mismatch || std::string(e.what()).find("plan '") != std::string::npos)
          throw;
        throw Error(e.code(), std::string(e.what()) + " [" + stepName(p, worker, step, op, slice) + "]", e.rank(), e.peer());
      }
    }
  }
}

}  // namespace forestcc::executor
