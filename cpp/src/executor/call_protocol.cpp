// The per-call protocol of the executor (schedules/README.md, "Call stamps"): a rank publishes
// what its call is (stamp, buffer handles, block offsets) when it enters; peers read it through
// their connection to it before they touch its memory, after each wait that a signal of it ended,
// and while such a wait blocks. Any difference is a MismatchError on every rank of the call.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "transport/stamp_seqlock.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/executor.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {

bool sameCall(const CallStamp& a, const CallStamp& b) {
  return a.sequence == b.sequence && a.planHash == b.planHash && a.count == b.count && a.root == b.root &&
         a.collective == b.collective && a.dtype == b.dtype && a.op == b.op && a.variable == b.variable;
}

}  // namespace

// "all_reduce(count=1000, dtype=float32, op=sum, plan=forestcc.builtin.direct#3f2a...)".
std::string describeCall(const CallStamp& st) {
  if (st.collective == kRefusedCall) return "a refused call";
  const auto c = static_cast<plan::Collective>(st.collective);
  std::ostringstream o;
  o << (st.variable ? "all_to_all_v" : plan::name(c)) << "(";
  if (c != plan::Collective::Barrier) {
    if (!st.variable) o << "count=" << st.count << ", ";
    o << "dtype=" << name(static_cast<DataType>(st.dtype)) << ", ";
  }
  if (plan::reduces(c))
    o << "op=" << (st.op & kPreMultipliedOp ? "premul_" : "") << name(static_cast<ReduceOp>(st.op & ~kPreMultipliedOp))
      << ", ";
  if (plan::rooted(c)) o << "root=" << st.root << ", ";
  o << "plan=" << std::string(st.family, strnlen(st.family, kPlanFamilyChars)) << "#" << std::hex
    << (st.planHash >> 32) << ")";
  return o.str();
}

void Executor::refuseCall() noexcept {
  Communicator::State& s = *state_;
  try {
    if (s.poisoned()) return;  // the peers learn of that
    awaitStampWindow(sequence_ + 1);
    CallStamp st{};
    st.sequence = ++sequence_;
    refused_ = st.sequence;
    st.collective = kRefusedCall;
    std::snprintf(st.family, sizeof st.family, "refused");
    CallMailbox& mb = s.mailbox();
    writeStamp(mb.byCall[st.sequence % kStampHistory], st);
    __atomic_store_n(&mb.sequence, st.sequence, __ATOMIC_RELEASE);
    ringPeerDoorbells();
    s.published();
  } catch (...) {
    // The caller raises the refusal's own error; a peer that waits for this rank then finds it
    // at its timeout, as it would without this.
  }
}

void Executor::publish(Call& call) {
  Communicator::State& s = *state_;
  CallMailbox& mb = s.mailbox();
  const uint64_t generation = sharedAllocationGeneration();
  for (int b = 0; b < 2; ++b) {
    Published& last = published_[b];
    const uint64_t address = reinterpret_cast<uint64_t>(call.geometry.local[b]);
    const uint64_t bytes = call.geometry.localBytes[b];
    if (last.generation != generation || last.address != address || last.bytes != bytes) {
      mb.handles[b] = s.describe(call.geometry.local[b], bytes);
      last = {address, bytes, generation, mb.handles[b].kind == MemoryKind::Host && mb.handles[b].shmId == 0};
    }
    // Peers copy it with cross-process calls: the fewer pages, the cheaper (huge_pages.hpp). In
    // place, input and output are one use.
    if (last.privateHost && !(b == 1 && address == published_[0].address))
      hugePages_.used(call.geometry.local[b], bytes);
  }
  // all_to_all_v through laid-out scratch publishes it once sized (layOutScratch).
  if (!(call.variable && call.plan->laysOutScratch)) publishScratch(call);
  if (call.variable)
    for (int b = 0; b < 2; ++b)
      std::memcpy(mb.blockOffsets[b], call.geometry.localOffsets[b], sizeof(uint64_t) * (call.plan->nranks + 1));
  writeStamp(mb.byCall[call.sequence % kStampHistory], call.stamp);
  if (call.bank >= 0) writeStamp(mb.byEagerCall[call.bank], call.stamp);
  // The rest are plain stores, published by the first signal of this call (a release). The
  // sequence is a release store too: a peer that reads it past this call knows every signal this
  // rank sent in earlier calls has landed (watchPeer relies on it).
  __atomic_store_n(&mb.sequence, call.sequence, __ATOMIC_RELEASE);
  ringPeerDoorbells();
  s.published();
}

// A peer may sleep waiting for this rank's entry (awaitEntered, the stamp window): wake it, as a
// signal would. Host calls (publish) and GPU calls (the CUDA runner) both enter through here.
void Executor::ringPeerDoorbells() {
  Communicator::State& s = *state_;
  if (!peerDoorbellsKnown_) {
    for (int r = 0; r < s.size; ++r)
      if (r != s.rank && !s.connections[r].empty())
        if (Doorbell* d = s.link(r).peerDoorbell()) peerDoorbells_.push_back(d);
    peerDoorbellsKnown_ = true;
  }
  for (Doorbell* d : peerDoorbells_) ringDoorbell(*d);
}

void Executor::publishScratch(const Call& call) {
  // Eager calls leave the scratch handle as it is: peers reach this rank's bank through their
  // link, never through it (and the latency of those small calls is the point of them).
  if (call.bank >= 0) return;
  Communicator::State& s = *state_;
  CallMailbox& mb = s.mailbox();
  const uint64_t scratchBytes = call.geometry.localBytes[2];
  const void* data = scratchBytes ? scratch_->data() : nullptr;
  if (!scratchPublished_ || data != publishedScratch_) {
    mb.handles[2] = data ? s.describe(data, scratch_->size()) : MemoryHandle{};
    publishedScratch_ = data;
    scratchPublished_ = true;
  }
  mb.handles[2].size = scratchBytes;
}

const PeerView& Executor::peerView(Call& call, int worker, int peer) {
  PeerView& v = views_[worker][peer];
  if (v.sequence == call.sequence) return v;
  Connection& link = state_->link(peer);
  const uint64_t theirs = link.peerSequence();
  static const Where kBeforeTouching{nullptr, 0, 0, nullptr, 0, "before touching its memory"};
  // Past this call, it may have refused it (or called another): its stamp of this call says.
  if (theirs > call.sequence) checkStamp(call, peer, kBeforeTouching);
  if (theirs != call.sequence)
    throw Error(ErrorCode::Internal,
                rankPrefix(state_->rank) + "plan '" + call.plan->name + "' reaches rank " + std::to_string(peer) +
                    "'s memory before that rank entered this call (it is at collective #" + std::to_string(theirs) +
                    ", this rank at #" + std::to_string(call.sequence) +
                    "): the plan breaks the entry rule, or the ranks call collectives in different orders",
                state_->rank, peer);
  checkStamp(call, peer, kBeforeTouching);
  v.checked = call.sequence;
  for (int b = 0; b < plan::kBufferCount; ++b) {
    const MemoryHandle& h = link.peerBuffer(b);
    PeerBuffer& pb = v.buffers[b];
    if (h.size == 0) {
      pb = PeerBuffer{};
      pb.connection = &link;
      continue;
    }
    pb.connection = &state_->connection(peer, h);
    pb.region = pb.connection->attach(h);
  }
  v.blockOffsets[0] = link.peerBlockOffsets(0);
  v.blockOffsets[1] = link.peerBlockOffsets(1);
  v.sequence = call.sequence;
  return v;
}

void Executor::awaitEntered(const Call& call, int peer, const char* purpose) {
  Communicator::State& s = *state_;
  Connection& link = s.link(peer);
  auto entered = [&] { return link.peerSequence() >= call.sequence; };
  const WaitOutcome outcome = waitUntil(entered, s.waitPolicy(peer, s.timeout));
  if (outcome != WaitOutcome::Ready)
    s.raiseWaitFailure(outcome, peer,
                       "collective #" + std::to_string(call.sequence) + " (" + describeCall(call.stamp) +
                           "): waiting for rank " + std::to_string(peer) + " to enter it" + purpose,
                       s.timeout);
}

void Executor::checkStamp(const Call& call, int peer, const Where& where) {
  CallStamp theirs;
  const bool read = state_->link(peer).peerStamp(call.sequence, theirs);
  checkStampValue(call, peer, read, theirs, where);
}

void Executor::checkStampValue(const Call& call, int peer, bool read, const CallStamp& theirs, const Where& where) {
  const CallStamp& mine = call.stamp;
  if (read && sameCall(theirs, mine)) return;
  std::string what;
  const std::string them = "rank " + std::to_string(peer);
  if (!read || theirs.sequence > mine.sequence) {
    what = them + " is already past this call (" + (read ? "at collective #" + std::to_string(theirs.sequence)
                                                         : std::string("two or more calls ahead")) +
           "): the ranks call collectives in different orders or numbers";
  } else if (theirs.sequence < mine.sequence) {
    // Where it is: its last call's number (the stamp read is this call's slot, maybe unwritten).
    what = them + " has not entered this call (it is at collective #" + std::to_string(state_->link(peer).peerSequence()) +
           ") but its signal arrived: an earlier call left a signal behind, or the ranks call collectives in "
           "different orders";
  } else if (theirs.collective == kRefusedCall) {
    what = them + " refused its part of this call (an error in its arguments or its plan, which it raised there) "
                  "and went on without it: a rank that catches a collective's error must not go on with the next "
                  "call, whose data would meet this one's";
  } else {
    what = them + " called " + describeCall(theirs) + " where this rank called " + describeCall(mine);
    const bool sameArguments = theirs.collective == mine.collective && theirs.variable == mine.variable &&
                               theirs.root == mine.root && theirs.dtype == mine.dtype && theirs.op == mine.op &&
                               theirs.count == mine.count;
    if (sameArguments && (theirs.planHash ^ mine.planHash) == kPacketsStampFold)
      what += std::string(": ") + (mine.planHash == call.plan->stamp.planHash ? "that rank" : "this rank") +
              " moves this call's data as packets, the other with signals: FORESTCC_PACKETS must be the same on "
              "every rank";
    else if (sameArguments)
      what += ": the ranks chose different algorithms or plans. algo=\"auto\" decides by each rank's buffers "
              "(forestcc.empty or ordinary memory, in place or not): give every rank the same kind and placement, "
              "or name the algorithm";
    else if (theirs.collective == mine.collective && theirs.variable == mine.variable && theirs.root == mine.root &&
             theirs.op == mine.op)
      what += " (do the ranks' counts and dtypes agree?)";
  }
  // A peer may still be in the call this rank just refused, or have sent into this one for it.
  if (refused_ && refused_ + 2 >= mine.sequence)
    what += " (this rank refused its part of collective #" + std::to_string(refused_) + ")";
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
  o << "FORESTCC_DEBUG: collective #" << call.sequence << " on each rank:";
  for (int r = 0; r < s.size; ++r) {
    o << "\n  rank " << r << ": ";
    if (r == s.rank) {
      o << describeCall(call.stamp);
      continue;
    }
    if (s.connections[r].empty()) {
      o << "not connected";
      continue;
    }
    CallStamp st;
    Connection& link = s.link(r);
    const bool read = link.peerStamp(call.sequence, st);
    if (read && st.sequence == call.sequence) o << describeCall(st);
    else o << "not in this call (at collective #" << link.peerSequence() << ")";
  }
  return o.str();
}

void Executor::awaitStampWindow(uint64_t sequence) {
  if (sequence % kStampWindow) return;
  Communicator::State& s = *state_;
  const uint64_t floor = sequence - kStampWindow;
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank || s.connections[r].empty()) continue;
    Connection& link = s.link(r);
    auto ready = [&] { return link.peerSequence() >= floor; };
    const WaitOutcome outcome = waitUntil(ready, s.waitPolicy(r, s.timeout));
    if (outcome != WaitOutcome::Ready)
      s.raiseWaitFailure(outcome, r,
                         "collective #" + std::to_string(sequence) + ": waiting for rank " + std::to_string(r) +
                             " to enter collective #" + std::to_string(floor) + " (a rank runs at most " +
                             std::to_string(kStampWindow) + " calls ahead)",
                         s.timeout);
  }
}

void Executor::confirmPeer(Call& call, int worker, const ExecChannel& ch, const Failure& at) {
  PeerView& v = views_[worker][ch.peer];
  if (v.checked == call.sequence) return;
  checkStamp(call, ch.peer, whereOf(call, worker, at));
  v.checked = call.sequence;
}

void Executor::blockInWait(Call& call, int worker, const ExecChannel& ch, const std::function<bool()>& ready,
                           const Failure& at, const char* awaited) {
  Communicator::State& s = *state_;
  WaitPolicy policy = s.waitPolicy(ch.peer, s.timeout);
  // While it blocks: a peer that entered this call with another stamp, or left it without
  // sending what is awaited, is an error now rather than at the timeout.
  auto watch = [&] {
    if (!ch.link) return;
    const uint64_t peerAt = ch.link->peerSequence();
    if (peerAt < call.sequence) return;  // not there yet: keep waiting
    if (peerAt == call.sequence) {
      checkStamp(call, ch.peer, whereOf(call, worker, at));
      return;
    }
    // It left this call; everything it sent in it has landed (its sequence is a release store).
    if (ready()) return;
    const Where where = whereOf(call, worker, at);
    checkStamp(call, ch.peer, where);
    const std::string message = rankPrefix(s.rank) + "collective #" + std::to_string(call.sequence) + " (" +
                                describeCall(call.stamp) + "): rank " + std::to_string(ch.peer) +
                                " made the same call but finished it without " + awaited + " this rank waits for [" +
                                where.describe() + "]: the plan's signals do not balance";
    s.poison(message, ErrorCode::Mismatch, call.sequence);
    throw Error(ErrorCode::Mismatch, message, s.rank, ch.peer);
  };
  const WaitOutcome outcome = waitUntil(ready, policy, watch);
  if (outcome != WaitOutcome::Ready)
    s.raiseWaitFailure(outcome, ch.peer, whereOf(call, worker, at).describe() + " for rank " + std::to_string(ch.peer),
                       s.timeout);
}

void Executor::checkEagerPeers(const Call& call) {
  static const Where kEagerEnd{nullptr, 0, 0, nullptr, 0, "at the end of an eager call"};
  // Every peer's stamp of this call is visible here: the plan waited for an event of each
  // peer in this call (the verifier's rule for eager plans), which it made after publishing; and
  // no peer can have stamped the next eager call but one over it before this rank starts the next.
  for (const ExecChannel& ch : call.plan->channels)
    if (ch.link) {
      // The bank's stamp says that what the peer wrote into this rank's bank is of this call (one
      // cache line to read per peer). When it differs, its stamp of this call says what it ran
      // instead (another algorithm, say), for the message.
      CallStamp bank;
      const bool read = ch.link->peerEagerStamp(call.bank, bank);
      if (read && sameCall(bank, call.stamp)) continue;
      checkStamp(call, ch.peer, kEagerEnd);
      checkStampValue(call, ch.peer, read, bank, kEagerEnd);
    }
}

}  // namespace forestcc::executor
