// The proxy thread of a communicator's tcp transport: one epoll loop over every socket of every
// tcp peer. It sends what worker threads queued (TcpPeer::send), reads what arrives and applies
// it (TcpPeer::receive), and turns a peer whose sockets close without a goodbye into the poison
// that wakes this rank's waiters. Worker threads never block on a socket.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "transport/tcp/tcp_peer.hpp"

namespace forestcc::tcp {

class TcpProxy {
 public:
  explicit TcpProxy(int rank);
  ~TcpProxy();
  // Before start(): the peers whose sockets it serves.
  void add(std::shared_ptr<TcpPeer> peer);
  void start();
  void wake();
  // Waits up to `seconds` until every queue to a peer still there is sent and acknowledged by
  // the peer's kernel (a goodbye, say); the thread keeps serving the sockets meanwhile.
  void drain(double seconds);
  void stop();

 private:
  void run();
  void sendPending();
  void lost(TcpPeer& peer, int stream);

  int rank_;
  int epoll_ = -1;
  int wakeFd_ = -1;
  std::atomic<bool> running_{false};
  std::atomic<bool> wakePending_{false};
  std::thread thread_;
  std::vector<std::shared_ptr<TcpPeer>> peers_;
};

}  // namespace forestcc::tcp
