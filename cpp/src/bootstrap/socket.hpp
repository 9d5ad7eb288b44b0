// Blocking TCP sockets with deadlines: every call that can wait takes a Deadline and throws
// forestcc::Error (Timeout / Remote / System) instead of hanging; a deadline with a cancel flag
// also ends the wait soon after the flag is set (Aborted).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace forestcc {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  const std::atomic<bool>* cancel = nullptr;  // set: the wait is given up (ncclCommAbort of an init)
  // The host program's signals end the wait (checkInterrupt: Ctrl-C in Python), checked between
  // polls. Only where the caller survives a wait abandoned part-way (the bootstrap's operations).
  bool interruptible = false;
  static Deadline in(double seconds, const std::atomic<bool>* cancel = nullptr);
  // For poll(); 0 when expired; at most 100 ms with a cancel flag or interruptible, so that they
  // are checked between polls.
  int remainingMs() const;
  bool sliced() const { return cancel || interruptible; }
  bool expired() const { return Clock::now() >= at; }
  bool cancelled() const { return cancel && cancel->load(std::memory_order_acquire); }
  // After a poll that timed out: throws Interrupted for a signal (interruptible), Aborted when
  // cancelled, Timeout (`what`) when expired; returns when the wait should go on.
  void check(int rank, int peer, const std::string& what) const;
};

// An IPv4/IPv6 address with port, printable as "host:port".
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string toString() const;
  uint16_t port() const;
  static SocketAddress parse(const std::string& hostPort);  // "host:port", resolves names
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  int release() { int f = fd_; fd_ = -1; return f; }

  static Socket listen(const SocketAddress& addr);  // port 0 picks one
  // Connects, retrying refused/unreachable until the deadline (the listener may not be up yet).
  // `who` names the listening side in the timeout error ("rank 0").
  static Socket connect(const SocketAddress& addr, const Deadline& deadline, int rank, const std::string& who);
  // Waits for one incoming connection.
  Socket accept(const Deadline& deadline, int rank);
  SocketAddress localAddress() const;

  // Full writes/reads. `who` names the other side in errors ("rank 3", "the root").
  void sendAll(const void* data, size_t size, const Deadline& deadline, int rank,
               const std::string& who);
  void recvAll(void* data, size_t size, const Deadline& deadline, int rank, const std::string& who,
               int peer = -1);
  // True when data (or EOF) is ready within ms milliseconds.
  bool readable(int ms) const;

 private:
  int fd_ = -1;
};

}  // namespace forestcc
