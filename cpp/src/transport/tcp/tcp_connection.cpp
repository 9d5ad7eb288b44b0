#include "transport/tcp/tcp_connection.hpp"

#include <cstring>

#include "forestcc/error.hpp"
#include "transport/stamp_seqlock.hpp"
#include "transport/tcp/exposure.hpp"

namespace forestcc::tcp {

TcpConnection::TcpConnection(std::shared_ptr<TcpPeer> peer, LocalSide local)
    : peer_(std::move(peer)), local_(std::move(local)) {}

bool TcpConnection::reaches(const MemoryHandle& h) const {
  return h.kind == MemoryKind::Host && h.ownerRank == peer_->peer();
}

RemoteRegion TcpConnection::attach(const MemoryHandle& h) { return RemoteRegion{nullptr, h.address, h.size}; }

void TcpConnection::checkRange(const RemoteRegion& r, uint64_t offset, uint64_t bytes, const char* what) const {
  if (offset <= r.size && bytes <= r.size - offset) return;
  throw Error(ErrorCode::InvalidUsage,
              rankPrefix(local_.rank) + what + " range [" + std::to_string(offset) + ", " + std::to_string(offset) +
                  "+" + std::to_string(bytes) + ") is outside the " + std::to_string(r.size) + " bytes of " +
                  peer_->who() + "'s memory",
              local_.rank, peer_->peer());
}

void TcpConnection::write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) {
  checkRange(dst, offset, bytes, "put: destination");
  peer_->put(dst.address + offset, src, bytes);
}

void TcpConnection::read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) {
  checkRange(src, offset, bytes, "get: source");
  peer_->get(dst, src.address + offset, bytes);
}

void TcpConnection::flush() { peer_->flush(); }

void TcpConnection::signal(SemaphoreSet set, int index) { peer_->signal(set, index); }

uint64_t* TcpConnection::inboundWord(SemaphoreSet set, int index) { return peer_->inboundWord(set, index); }

void TcpConnection::callPublished(const CallMailbox& mine) {
  MailboxMessage m{};
  m.sequence = mine.sequence;
  m.stamp = mine.byCall[mine.sequence % kStampHistory];
  m.eagerBank = -1;
  for (int b = 0; b < 2; ++b)
    if (mine.byEagerCall[b].sequence == mine.sequence) {
      m.eagerBank = b;
      m.eagerStamp = mine.byEagerCall[b];
    }
  for (int b = 0; b < 3; ++b) m.handles[b] = mine.handles[b];
  m.offsetCount = m.stamp.variable ? local_.size + 1 : 0;
  std::string body(reinterpret_cast<const char*>(&m), sizeof m);
  for (int b = 0; b < 2 && m.offsetCount; ++b)
    body.append(reinterpret_cast<const char*>(mine.blockOffsets[b]), sizeof(uint64_t) * m.offsetCount);
  peer_->sendControl(MessageType::Mailbox, std::move(body));
}

uint64_t TcpConnection::peerSequence() { return peer_->sequence.load(std::memory_order_acquire); }

bool TcpConnection::peerStamp(uint64_t sequence, CallStamp& out) {
  return readStamp(peer_->byCall[sequence % kStampHistory], out);
}

bool TcpConnection::peerEagerStamp(int bank, CallStamp& out) { return readStamp(peer_->byEagerCall[bank], out); }

const MemoryHandle& TcpConnection::peerBuffer(int buffer) { return peer_->handles[buffer]; }

const uint64_t* TcpConnection::peerBlockOffsets(int buffer) { return peer_->blockOffsets[buffer]; }

RemoteRegion TcpConnection::peerBank(int bank) { return RemoteRegion{nullptr, peer_->bank(bank), kScratchBankBytes}; }

void TcpConnection::postSend(const MemoryHandle& buffer) {
  // The receiver gets the data from this buffer: offered until the next post (the sender waits
  // for the answer before it returns, so the buffer lives that long).
  posted_ = local_.exposure->expose(buffer.address, buffer.size);
  peer_->sendAnswer.store(0, std::memory_order_relaxed);
  peer_->sendControl(MessageType::SendPost, std::string(reinterpret_cast<const char*>(&buffer), sizeof buffer));
}

int64_t TcpConnection::sendStatus() { return peer_->sendAnswer.load(std::memory_order_acquire); }

const MemoryHandle& TcpConnection::peerSendPost() { return peer_->sendPost; }

void TcpConnection::answerSendPost(int64_t status) {
  peer_->sendControl(MessageType::SendAnswer, {}, static_cast<uint64_t>(status));
}

void TcpConnection::abort(const std::string& reason, ErrorCode code, uint64_t call) {
  if (peer_->dead()) return;
  peer_->sendControl(MessageType::Abort, reason, call, static_cast<uint64_t>(code));
}

}  // namespace forestcc::tcp
