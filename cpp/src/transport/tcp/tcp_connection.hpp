// tcp: a peer on another node (or any peer, with FORESTCC_TRANSPORT=tcp), reached through
// sockets that the communicator's proxy thread serves. Nothing of the peer is mapped: memory is
// reached by puts and gets the proxy carries, signals land in counters this rank owns, and the
// per-call protocol arrives as messages (the peer's mailbox, send posts, answers) that the
// proxy applies to a copy read here. Puts are asynchronous: flush() waits until they left.
#pragma once

#include <memory>

#include "transport/connection.hpp"
#include "transport/tcp/tcp_peer.hpp"

namespace forestcc::tcp {

class TcpConnection : public Connection {
 public:
  TcpConnection(std::shared_ptr<TcpPeer> peer, LocalSide local);
  TransportKind transport() const override { return TransportKind::Tcp; }
  int peer() const override { return peer_->peer(); }

  bool reaches(const MemoryHandle& h) const override;
  RemoteRegion attach(const MemoryHandle& h) override;
  void write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) override;
  void read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) override;
  void flush() override;
  uint64_t readTileBytes() const override { return 4 << 20; }  // a get is a round trip through the proxies

  uint64_t* signalWord(SemaphoreSet, int) override { return nullptr; }
  void signal(SemaphoreSet set, int index) override;
  uint64_t* inboundWord(SemaphoreSet set, int index) override;

  void callPublished(const CallMailbox& mine) override;
  uint64_t peerSequence() override;
  bool peerStamp(uint64_t sequence, CallStamp& out) override;
  bool peerEagerStamp(int bank, CallStamp& out) override;
  const MemoryHandle& peerBuffer(int buffer) override;
  const uint64_t* peerBlockOffsets(int buffer) override;
  RemoteRegion peerBank(int bank) override;

  void postSend(const MemoryHandle& buffer) override;
  int64_t sendStatus() override;
  const MemoryHandle& peerSendPost() override;
  void answerSendPost(int64_t status) override;

  void abort(const std::string& reason, ErrorCode code, uint64_t call) override;
  const std::atomic<bool>* peerLeftFlag() const override { return &peer_->left(); }

 private:
  void checkRange(const RemoteRegion& r, uint64_t offset, uint64_t bytes, const char* what) const;

  std::shared_ptr<TcpPeer> peer_;
  LocalSide local_;
  std::shared_ptr<void> posted_;  // the buffer of this rank's last send post, offered to the peer's get
};

}  // namespace forestcc::tcp
