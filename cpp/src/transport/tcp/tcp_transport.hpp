// The tcp transport: reaches ranks on other nodes (any rank but this one, when
// FORESTCC_TRANSPORT=tcp forces it). Made before the rendezvous, because its listening address is
// part of what each rank tells the others (PeerInfo::tcpAddress). connect() makes
// FORESTCC_TCP_STREAMS sockets per peer: the lower rank connects, the higher accepts (connects
// complete in the listener's backlog, so the order in which ranks connect cannot deadlock), and
// each side says hello (its rank, the stream, its eager banks). Once every connection is made
// (connected()), the proxy thread starts.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "bootstrap/socket.hpp"
#include "transport/tcp/exposure.hpp"
#include "transport/tcp/tcp_peer.hpp"
#include "transport/tcp/tcp_proxy.hpp"
#include "transport/transport.hpp"

namespace forestcc::tcp {

// How long a goodbye may take to reach the peers' kernels (less under a shorter FORESTCC_TIMEOUT).
constexpr double kGoodbyeSeconds = 10;

struct TcpOptions {
  int rank = 0;
  int size = 1;
  ControlBlock* control = nullptr;
  double timeout = 300;
  int streams = 2;            // FORESTCC_TCP_STREAMS
  std::string ifname;         // FORESTCC_SOCKET_IFNAME ("" : the route to rank 0)
  std::string rootAddress;    // rank 0's rendezvous address ("host:port"; "" when unknown)
};

class TcpTransport : public Transport {
 public:
  explicit TcpTransport(const TcpOptions& options);
  ~TcpTransport() override;
  TransportKind kind() const override { return TransportKind::Tcp; }
  // "host:port" peers connect to.
  std::string address() const { return address_; }

  bool reaches(const PeerInfo& peer) const override { return peer.rank != options_.rank && !peer.tcpAddress.empty(); }
  bool reaches(const MemoryHandle& h) const override { return h.kind == MemoryKind::Host && h.ownerRank != options_.rank; }
  std::shared_ptr<void> registerMemory(const void* data, uint64_t bytes, MemoryHandle& h) const override;
  std::unique_ptr<Connection> connect(const PeerInfo& peer) override;
  void connected() override;
  // Queues a goodbye to every peer still there (once), then waits, a bounded time, until the
  // peers' kernels have it: the destructor, and the exit of a process that never destroyed the
  // communicator (goodbye_at_exit.hpp).
  void sendGoodbye();
  void awaitDelivered(double seconds = kGoodbyeSeconds);

 private:
  Socket acceptFrom(int peer, int stream, uint64_t token, Hello& theirs);
  Hello helloFor(int stream, uint64_t token) const;

  TcpOptions options_;
  LocalSide local_;
  Socket listener_;
  std::string address_;
  std::string selfAddress_;
  std::unique_ptr<TcpProxy> proxy_;
  std::atomic<bool> goodbyeSent_{false};
  std::vector<std::shared_ptr<TcpPeer>> peers_;
  // Sockets accepted while waiting for another peer's, by (rank, stream), with their hellos.
  std::map<std::pair<int, int>, std::pair<Socket, Hello>> early_;
};

}  // namespace forestcc::tcp
