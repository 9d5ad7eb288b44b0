#include "channels/memory_channel.hpp"

#include <cmath>
#include <sstream>

namespace forestcc {

MemoryChannel::MemoryChannel(std::shared_ptr<Communicator::State> comm, int peer, RegisteredMemory local,
                             Connection& connection, RemoteRegion remote, uint64_t* inbound, int remoteSlot,
                             std::string name)
    : comm_(std::move(comm)), peer_(peer), local_(std::move(local)), connection_(connection), remote_(remote),
      inbound_(inbound), remoteSlot_(remoteSlot), name_(std::move(name)) {}

void MemoryChannel::checkRange(const char* op, const char* which, uint64_t offset, uint64_t bytes, uint64_t limit,
                               const char* whose) const {
  // Written so that offset + bytes cannot overflow.
  if (offset > limit || bytes > limit - offset)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(comm_->rank) + op + " on channel " + name_ + ": " + which + " range [" +
                    std::to_string(offset) + ", " + std::to_string(offset) + "+" + std::to_string(bytes) +
                    ") is outside " + whose + " registered memory of " + std::to_string(limit) + " bytes",
                comm_->rank, peer_);
}

void MemoryChannel::put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
  checkRange("put", "source", srcOffset, bytes, local_.size(), "the local");
  checkRange("put", "destination", dstOffset, bytes, remote_.size, "the peer's");
  connection_.write(remote_, dstOffset, static_cast<const char*>(local_.data()) + srcOffset, bytes);
}

void MemoryChannel::get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
  checkRange("get", "destination", dstOffset, bytes, local_.size(), "the local");
  checkRange("get", "source", srcOffset, bytes, remote_.size, "the peer's");
  connection_.read(static_cast<char*>(local_.data()) + dstOffset, remote_, srcOffset, bytes);
}

void MemoryChannel::signal() { connection_.signal(SemaphoreSet::Channel, remoteSlot_); }

bool MemoryChannel::test() {
  if (__atomic_load_n(inbound_, __ATOMIC_ACQUIRE) < expected_ + 1) return false;
  ++expected_;
  return true;
}

void MemoryChannel::wait(double timeoutSeconds) {
  if (test()) return;
  if (std::isnan(timeoutSeconds))
    throw Error(ErrorCode::InvalidUsage, rankPrefix(comm_->rank) + "wait on channel " + name_ + ": timeout is NaN",
                comm_->rank, peer_);
  const bool own = timeoutSeconds >= 0;  // the caller's limit, not the communicator's
  const double timeout = own ? timeoutSeconds : comm_->timeout;  // (inf: waitUntil clamps it)
  WaitPolicy policy = comm_->waitPolicy(peer_, timeout);
  WaitOutcome outcome = waitUntil([&] { return __atomic_load_n(inbound_, __ATOMIC_ACQUIRE) >= expected_ + 1; }, policy);
  if (outcome == WaitOutcome::Ready) {
    ++expected_;
    return;
  }
  const std::string what = "wait on channel " + name_ + " (signal #" + std::to_string(expected_ + 1) + ")";
  // A limit the caller chose is its own business: the signal may still come, and the channel and
  // its communicator stay usable (the next wait waits for the same signal). Not so the
  // communicator's own timeout, which poisons as every other wait's does.
  if (own && outcome == WaitOutcome::Timeout) {
    std::ostringstream msg;
    msg << rankPrefix(comm_->rank) << what << ": no signal from rank " << peer_ << " within the " << timeoutSeconds
        << " s given to wait()";
    throw Error(ErrorCode::Timeout, msg.str(), comm_->rank, peer_);
  }
  comm_->raiseWaitFailure(outcome, peer_, what, timeout);
}

void MemoryChannel::flush() { connection_.flush(); }

}  // namespace forestcc
