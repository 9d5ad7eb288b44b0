#include "transport/tcp/tcp_proxy.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "forestcc/error.hpp"

namespace forestcc::tcp {

namespace {
constexpr uint64_t kWakeTag = ~0ull;
uint64_t tag(size_t peer, int stream) { return (static_cast<uint64_t>(peer) << 8) | static_cast<uint64_t>(stream); }
}  // namespace

TcpProxy::TcpProxy(int rank) : rank_(rank) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_ < 0 || wakeFd_ < 0)
    throw Error(ErrorCode::System, rankPrefix(rank) + "tcp proxy: epoll/eventfd: " + std::strerror(errno), rank);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_, EPOLL_CTL_ADD, wakeFd_, &ev);
}

TcpProxy::~TcpProxy() {
  stop();
  if (epoll_ >= 0) ::close(epoll_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

void TcpProxy::add(std::shared_ptr<TcpPeer> peer) {
  const size_t index = peers_.size();
  for (int s = 0; s < peer->streams(); ++s) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP;
    ev.data.u64 = tag(index, s);
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, peer->stream(s).fd, &ev) != 0)
      throw Error(ErrorCode::System, rankPrefix(rank_) + "tcp proxy: epoll_ctl: " + std::strerror(errno), rank_);
  }
  peer->setWake([this] { wake(); });
  peers_.push_back(std::move(peer));
}

void TcpProxy::start() {
  running_.store(true);
  thread_ = std::thread([this] { run(); });
}

void TcpProxy::wake() {
  // One eventfd write per burst: the proxy clears the flag before it looks at the queues.
  if (wakePending_.exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  ssize_t ignored = ::write(wakeFd_, &one, sizeof one);
  (void)ignored;
}

void TcpProxy::drain(double seconds) {
  if (!running_.load()) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  // Sent is not enough: a process that ends with bytes unread in a socket makes the kernel reset
  // its connections, which drops what it had not yet delivered. Acknowledged bytes are the peer's.
  auto pending = [&] {
    for (auto& p : peers_)
      if (!p->dead() && !p->left().load(std::memory_order_acquire))
        for (int s = 0; s < p->streams(); ++s)
          if (p->pendingOutput(s) || p->unacknowledged(s)) return true;
    return false;
  };
  while (pending() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void TcpProxy::stop() {
  if (!running_.load()) return;
  running_.store(false);
  wake();
  if (thread_.joinable()) thread_.join();
}

void TcpProxy::lost(TcpPeer& peer, int stream) {
  epoll_ctl(epoll_, EPOLL_CTL_DEL, peer.stream(stream).fd, nullptr);
  if (peer.saidGoodbye()) {
    peer.ended(stream);
    return;
  }
  // Stream 0 decides. The data streams of a peer that left may close, or be reset (it closed
  // them with bytes unread), before its goodbye is read on stream 0, which epoll may report
  // later; a peer that died loses stream 0 too. A data stream that breaks while its peer lives
  // leaves the transfers on it to their waits' deadlines. (CI: test_data_and_signals[3-tcp].)
  if (stream != 0) return;
  peer.markDead(peer.who() + " closed its connection without a goodbye: it died, or its host or link went away");
}

void TcpProxy::sendPending() {
  for (auto& p : peers_) {
    // A peer that left reads nothing more: what is queued for it stays (its flush fails), unsent.
    if (p->dead() || p->left().load(std::memory_order_acquire)) continue;
    for (int s = 0; s < p->streams(); ++s)
      if (p->pendingOutput(s) && !p->send(s)) lost(*p, s);
  }
}

void TcpProxy::run() {
  epoll_event events[64];
  while (running_.load(std::memory_order_acquire)) {
    const int n = epoll_wait(epoll_, events, 64, 100);
    for (int i = 0; i < n; ++i) {
      const uint64_t t = events[i].data.u64;
      if (t == kWakeTag) {
        uint64_t drained;
        ssize_t ignored = ::read(wakeFd_, &drained, sizeof drained);
        (void)ignored;
        wakePending_.store(false, std::memory_order_release);
        continue;
      }
      TcpPeer& p = *peers_[t >> 8];
      const int s = static_cast<int>(t & 0xff);
      try {
        if (events[i].events & EPOLLOUT) {
          p.stream(s).blocked = false;
          if (!p.send(s)) lost(p, s);
        }
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          const TcpPeer::Received r = p.receive(s);
          if (r != TcpPeer::Received::More) lost(p, s);
        }
      } catch (const std::exception& e) {
        p.markDead(std::string("the tcp proxy failed serving ") + p.who() + ": " + e.what());
      }
    }
    sendPending();  // TcpPeer::send reports a broken socket by its result, never by throwing
  }
}

}  // namespace forestcc::tcp
