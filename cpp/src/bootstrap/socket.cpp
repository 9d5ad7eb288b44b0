#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "forestcc/error.hpp"

namespace forestcc {

Deadline Deadline::in(double seconds, const std::atomic<bool>* cancel) {
  return {Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)), cancel};
}

int Deadline::remainingMs() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now()).count();
  if (left <= 0) return 0;
  const long cap = sliced() ? 100 : 1000000;
  return left > cap ? static_cast<int>(cap) : static_cast<int>(left);
}

void Deadline::check(int rank, int peer, const std::string& what) const {
  if (interruptible) checkInterrupt();
  if (cancelled())
    throw Error(ErrorCode::Aborted, rankPrefix(rank) + what + ": stopped, the communicator was aborted", rank, peer);
  if (expired()) throw Error(ErrorCode::Timeout, rankPrefix(rank) + "timed out " + what, rank, peer);
}

std::string SocketAddress::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
}

uint16_t SocketAddress::port() const {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

SocketAddress SocketAddress::parse(const std::string& hostPort) {
  auto colon = hostPort.rfind(':');
  if (colon == std::string::npos || colon + 1 == hostPort.size())
    throw Error(ErrorCode::InvalidUsage, "forestcc: address '" + hostPort + "' is not host:port");
  std::string host = hostPort.substr(0, colon);
  std::string port = hostPort.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw Error(ErrorCode::InvalidUsage,
                "forestcc: cannot resolve '" + hostPort + "': " + gai_strerror(rc));
  SocketAddress out;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.length = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

static void tuneSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Socket Socket::listen(const SocketAddress& addr) {
  int fd = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwSystemError("socket", errno);
  Socket s(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0)
    throwSystemError("bind(" + addr.toString() + ")", errno);
  if (::listen(fd, 1024) != 0) throwSystemError("listen(" + addr.toString() + ")", errno);
  return s;
}

Socket Socket::connect(const SocketAddress& addr, const Deadline& deadline, int rank, const std::string& who) {
  int backoffMs = 1;
  while (true) {
    int fd = ::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throwSystemError("socket", errno, rank);
    Socket s(fd);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) == 0) {
      tuneSocket(fd);
      return s;
    }
    int err = errno;
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH ||
                 err == EHOSTUNREACH || err == EAGAIN || err == EINTR || err == ECONNRESET;
    if (!retry) throwSystemError("connect(" + addr.toString() + ")", err, rank);
    if (deadline.sliced() && !deadline.expired()) deadline.check(rank, -1, "connecting to " + who + " at " + addr.toString());
    if (deadline.expired())
      throw Error(ErrorCode::Timeout,
                  rankPrefix(rank) + "timed out connecting to " + who + " at " + addr.toString() + " (" +
                      std::strerror(err) + "); is it running and reachable?",
                  rank);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoffMs));
    backoffMs = std::min(backoffMs * 2, 100);
  }
}

Socket Socket::accept(const Deadline& deadline, int rank) {
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remainingMs());
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throwSystemError("poll", errno, rank);
    if (rc == 0) {
      deadline.check(rank, -1, "waiting for a connection");
      continue;
    }
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      throwSystemError("accept", errno, rank);
    }
    tuneSocket(fd);
    return Socket(fd);
  }
}

SocketAddress Socket::localAddress() const {
  SocketAddress a;
  a.length = sizeof a.storage;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0)
    throwSystemError("getsockname", errno);
  return a;
}

bool Socket::readable(int ms) const {
  pollfd p{fd_, POLLIN, 0};
  int rc = ::poll(&p, 1, ms);
  return rc > 0;
}

void Socket::sendAll(const void* data, size_t size, const Deadline& deadline, int rank,
                     const std::string& who) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd pf{fd_, POLLOUT, 0};
      int rc = ::poll(&pf, 1, deadline.remainingMs());
      if (rc == 0) deadline.check(rank, -1, "sending to " + who);
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET)
      throw Error(ErrorCode::Remote, rankPrefix(rank) + "connection to " + who + " closed (did it exit or die?)", rank);
    throwSystemError("send to " + who, errno, rank);
  }
}

void Socket::recvAll(void* data, size_t size, const Deadline& deadline, int rank,
                     const std::string& who, int peer) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd_, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0)
      throw Error(ErrorCode::Remote,
                  rankPrefix(rank) + "connection to " + who + " closed (did it exit or die?)", rank, peer);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      pollfd pf{fd_, POLLIN, 0};
      int rc = ::poll(&pf, 1, deadline.remainingMs());
      if (rc == 0) deadline.check(rank, peer, "waiting for data from " + who);
      continue;
    }
    if (errno == ECONNRESET)
      throw Error(ErrorCode::Remote, rankPrefix(rank) + "connection to " + who + " reset (did it die?)", rank, peer);
    throwSystemError("recv from " + who, errno, rank, peer);
  }
}

}  // namespace forestcc
