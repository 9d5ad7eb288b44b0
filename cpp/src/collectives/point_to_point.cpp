// Point-to-point send/recv of the engine (a rendezvous): the sender posts its buffer for the
// receiver and signals; the receiver copies, answers with a status and signals back.
#include "collectives/engine.hpp"
#include "core/state.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives {

void Engine::checkPeer(int peer, const char* what) const {
  auto& s = *comm_->state();
  if (peer < 0 || peer >= s.size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer " + std::to_string(peer) +
                                             " is out of range (0.." + std::to_string(s.size - 1) + ")", s.rank, peer);
  if (peer == s.rank)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer is this rank", s.rank, peer);
}

namespace {
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
  Connection& link = s.link(peer);
  link.postSend(s.describe(data, bytes));
  link.signal(SemaphoreSet::SendReady, 0);
  const uint64_t want = ++sendsDone_[peer];
  waitCounter(s, s.inboundWord(SemaphoreSet::RecvDone, peer, 0), want, peer,
              "send of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer) + " (waiting for its recv)");
  const int64_t status = link.sendStatus();
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
  Connection& link = s.link(peer);
  const uint64_t want = ++sendsReady_[peer];
  waitCounter(s, s.inboundWord(SemaphoreSet::SendReady, peer, 0), want, peer,
              "recv of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer) + " (waiting for its send)");
  const MemoryHandle sent = link.peerSendPost();
  auto done = [&](int64_t status) {
    link.answerSendPost(status);
    link.signal(SemaphoreSet::RecvDone, 0);
  };
  if (sent.size != bytes) {
    done(static_cast<int64_t>(bytes) + 1);
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "recv of " + std::to_string(bytes) + " bytes from rank " +
                                             std::to_string(peer) + ": it sent " + std::to_string(sent.size) + " bytes",
                s.rank, peer);
  }
  try {
    if (bytes) {
      Connection& c = s.connection(peer, sent);
      c.read(data, c.attach(sent), 0, bytes);
    }
  } catch (...) {
    done(-1);
    throw;
  }
  done(0);
}

}  // namespace forestcc::collectives
