// Point-to-point send/recv of the engine (a rendezvous): the sender posts its buffer for the
// receiver and signals; the receiver copies, answers with a status and signals back.
#include <algorithm>
#include <cstring>

#include "collectives/engine.hpp"
#include "core/state.hpp"
#include "forestcc/error.hpp"
#include "transport/remote_memory.hpp"

namespace forestcc::collectives {

void Engine::checkPeer(int peer, const char* what) const {
  auto& s = *comm_->state();
  if (peer < 0 || peer >= s.size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer " + std::to_string(peer) +
                                             " is out of range (0.." + std::to_string(s.size - 1) + ")", s.rank, peer);
  if (peer == s.rank)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer is this rank", s.rank, peer);
  if (s.nodeOf[peer] != s.nodeOf[s.rank])
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": rank " + std::to_string(peer) +
                                             " is on another node; this version moves data within one node only",
                s.rank, peer);
}

namespace {
int localIndexOf(const Communicator::State& s, int rank) {
  return static_cast<int>(std::find(s.localRanks.begin(), s.localRanks.end(), rank) - s.localRanks.begin());
}

void waitCounter(Communicator::State& s, uint64_t* counter, uint64_t want, int peer, const std::string& what) {
  if (__atomic_load_n(counter, __ATOMIC_ACQUIRE) >= want) return;
  WaitOutcome outcome;
  try {
    outcome = waitUntil([&] { return __atomic_load_n(counter, __ATOMIC_ACQUIRE) >= want; },
                        s.waitPolicy(peer, s.timeout));
  } catch (const Error& e) {
    // Interrupted (Ctrl-C) with a send posted or a receive counted: the pair is out of step (the
    // peer may still read a buffer the caller frees), so no later call may trust it. (Other
    // failures of a wait poison where they are raised.)
    if (e.code() == ErrorCode::Interrupted) s.poison(rankPrefix(s.rank) + what + " was interrupted");
    throw;
  }
  if (outcome != WaitOutcome::Ready) s.raiseWaitFailure(outcome, peer, what, s.timeout);
}
}  // namespace

void Engine::sendNow(const void* data, size_t bytes, int peer) {
  auto& s = *comm_->state();
  const int me = localIndexOf(s, s.rank), them = localIndexOf(s, peer);
  SendPost& post = s.control->sendPosts[them];
  post.buffer.address = reinterpret_cast<uint64_t>(data);
  post.buffer.bytes = bytes;
  size_t offset = 0;
  auto seg = bytes ? findSharedAllocation(data, bytes, &offset) : nullptr;
  post.buffer.segmentId = seg ? executor::segmentIdOf(seg->name()) : 0;
  if (seg) {
    post.buffer.segmentSize = seg->size();
    post.buffer.offset = offset;
    std::snprintf(post.buffer.segmentName, sizeof post.buffer.segmentName, "%s", seg->name().c_str());
  }
  post.status = 0;
  __atomic_fetch_add(&s.peerControl(peer)->sendReady[me].value, 1, __ATOMIC_RELEASE);
  const uint64_t want = ++sendsDone_[peer];
  waitCounter(s, &s.control->recvDone[them].value, want, peer,
              "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) + " (waiting for its recv)");
  const int64_t status = __atomic_load_n(&post.status, __ATOMIC_ACQUIRE);
  if (status < 0)
    throw Error(ErrorCode::Remote, rankPrefix(s.rank) + "send of " + std::to_string(bytes) + " bytes to rank " +
                                       std::to_string(peer) + ": the receiver failed to copy the data", s.rank, peer);
  if (status > 0)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "send of " + std::to_string(bytes) + " bytes to rank " +
                                             std::to_string(peer) + ": the matching recv expected " +
                                             std::to_string(status - 1) + " bytes", s.rank, peer);
}

void Engine::recvNow(void* data, size_t bytes, int peer) {
  auto& s = *comm_->state();
  const int me = localIndexOf(s, s.rank), them = localIndexOf(s, peer);
  const uint64_t want = ++sendsReady_[peer];
  waitCounter(s, &s.control->sendReady[them].value, want, peer,
              "recv of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer) + " (waiting for its send)");
  ControlBlock* theirs = s.peerControl(peer);
  SendPost& post = theirs->sendPosts[me];
  const uint64_t sent = post.buffer.bytes;
  auto done = [&](int64_t status) {
    __atomic_store_n(&post.status, status, __ATOMIC_RELAXED);
    __atomic_fetch_add(&theirs->recvDone[me].value, 1, __ATOMIC_RELEASE);
  };
  if (sent != bytes) {
    done(static_cast<int64_t>(bytes) + 1);
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "recv of " + std::to_string(bytes) + " bytes from rank " +
                                             std::to_string(peer) + ": it sent " + std::to_string(sent) + " bytes",
                s.rank, peer);
  }
  try {
    if (bytes) {
      if (post.buffer.segmentId) {
        std::memcpy(data, executor_.mapSegment(post.buffer, peer) + post.buffer.offset, bytes);
      } else {
        RemoteMemory::inProcess(s.peers[peer].pid, post.buffer.address, bytes, s.rank, peer).read(0, data, bytes);
      }
    }
  } catch (...) {
    done(-1);
    throw;
  }
  done(0);
}

}  // namespace forestcc::collectives
