#include "transport/tcp/tcp_transport.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstring>

#include "forestcc/error.hpp"
#include "transport/tcp/goodbye_at_exit.hpp"
#include "transport/tcp/interfaces.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace forestcc::tcp {

namespace {

uint64_t hashText(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Both ranks of a pair compute it from the two listening addresses: a connection from another
// communicator (another job, a reused port) never matches.
uint64_t pairToken(const std::string& a, const std::string& b) { return hashText(a < b ? a + "|" + b : b + "|" + a); }

void makeNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string helloMessage(const Hello& h) {
  WireHeader w{};
  w.type = MessageType::Hello;
  w.bodyBytes = sizeof h;
  return std::string(reinterpret_cast<const char*>(&w), sizeof w) + std::string(reinterpret_cast<const char*>(&h), sizeof h);
}

SocketAddress listenAddress(const TcpOptions& o) {
  if (!o.ifname.empty()) return selectInterfaces(o.ifname, o.rank).front().address;
  if (!o.rootAddress.empty()) {
    try {
      return routeTo(SocketAddress::parse(o.rootAddress), o.rank);
    } catch (const Error&) {
      // No route to an address that names no host (an unspecified one): one node.
    }
  }
  return SocketAddress::parse("127.0.0.1:0");
}

}  // namespace

TcpTransport::TcpTransport(const TcpOptions& options) : options_(options) {
  if (options_.streams < 1 || options_.streams > kMaxStreams)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(options_.rank) + "FORESTCC_TCP_STREAMS=" + std::to_string(options_.streams) +
                    " must be 1 to " + std::to_string(kMaxStreams),
                options_.rank);
  local_.rank = options_.rank;
  local_.size = options_.size;
  local_.control = options_.control;
  local_.timeout = options_.timeout;
  local_.exposure = std::make_shared<Exposure>(options_.control);
  listener_ = Socket::listen(listenAddress(options_));
  address_ = listener_.localAddress().toString();
  proxy_ = std::make_unique<TcpProxy>(options_.rank);
}

TcpTransport::~TcpTransport() {
  forgetAtExit(this);
  sendGoodbye();
  awaitDelivered();
  proxy_->stop();
}

void TcpTransport::sendGoodbye() {
  // Once: the peers take the sockets' closing after it as the end of the job, not a death.
  if (goodbyeSent_.exchange(true)) return;
  for (auto& p : peers_)
    if (!p->dead() && !p->left().load(std::memory_order_acquire)) p->sendControl(MessageType::Goodbye, {});
}

void TcpTransport::awaitDelivered(double seconds) { proxy_->drain(std::min(options_.timeout, seconds)); }

std::shared_ptr<void> TcpTransport::registerMemory(const void* data, uint64_t bytes, MemoryHandle&) const {
  if (!data || !bytes) return nullptr;
  return local_.exposure->expose(reinterpret_cast<uint64_t>(data), bytes);
}

Hello TcpTransport::helloFor(int stream, uint64_t token) const {
  Hello h{};
  h.magic = kHelloMagic;
  h.token = token;
  h.rank = options_.rank;
  h.stream = stream;
  h.streams = options_.streams;
  for (int b = 0; b < 2; ++b) h.banks[b] = reinterpret_cast<uint64_t>(options_.control->scratchBanks.bank[b]);
  return h;
}

Socket TcpTransport::acceptFrom(int peer, int stream, uint64_t token, Hello& theirs) {
  const Deadline deadline = Deadline::in(options_.timeout);
  for (;;) {
    auto early = early_.find({peer, stream});
    if (early != early_.end()) {
      Socket s = std::move(early->second.first);
      theirs = early->second.second;
      early_.erase(early);
      return s;
    }
    Socket s;
    try {
      s = listener_.accept(deadline, options_.rank);
    } catch (const Error& e) {
      throw Error(e.code(),
                  std::string(e.what()) + " (waiting for rank " + std::to_string(peer) + " to connect over tcp to " +
                      address_ + ": is FORESTCC_TRANSPORT the same on every rank, and can its host reach this one?)",
                  options_.rank, peer);
    }
    WireHeader w{};
    Hello h{};
    try {
      s.recvAll(&w, sizeof w, deadline, options_.rank, "a connecting rank");
      if (w.type != MessageType::Hello || w.bodyBytes != sizeof h) continue;  // not ours: drop it
      s.recvAll(&h, sizeof h, deadline, options_.rank, "a connecting rank");
    } catch (const Error&) {
      continue;  // a stray connection that went away
    }
    if (h.magic != kHelloMagic || h.rank < 0 || h.rank >= options_.size || h.stream < 0 || h.stream >= options_.streams)
      continue;
    if (h.streams != options_.streams)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(options_.rank) + "rank " + std::to_string(h.rank) + " uses FORESTCC_TCP_STREAMS=" +
                      std::to_string(h.streams) + ", this rank " + std::to_string(options_.streams) +
                      ": every rank must use the same",
                  options_.rank, h.rank);
    if (h.rank == peer && h.stream == stream) {
      if (h.token != token) continue;
      theirs = h;
      return s;
    }
    early_[{h.rank, h.stream}] = {std::move(s), h};
  }
}

std::unique_ptr<Connection> TcpTransport::connect(const PeerInfo& peer) {
  const uint64_t token = pairToken(address_, peer.tcpAddress);
  auto p = std::make_shared<TcpPeer>(local_, peer.rank,
                                     "rank " + std::to_string(peer.rank) + " (pid " + std::to_string(peer.pid) + " on " + peer.node +
                                         ", " + peer.tcpAddress + ")",
                                     options_.streams);
  const Deadline deadline = Deadline::in(options_.timeout);
  for (int s = 0; s < options_.streams; ++s) {
    Socket sock;
    if (options_.rank < peer.rank) {
      sock = Socket::connect(SocketAddress::parse(peer.tcpAddress), deadline, options_.rank,
                             "rank " + std::to_string(peer.rank) + " over tcp");
      // Its hello comes back as the first message the proxy reads on this socket.
      const std::string mine = helloMessage(helloFor(s, token));
      sock.sendAll(mine.data(), mine.size(), deadline, options_.rank, "rank " + std::to_string(peer.rank));
    } else {
      Hello theirs{};
      sock = acceptFrom(peer.rank, s, token, theirs);
      if (s == 0) p->hello(theirs);
      const std::string mine = helloMessage(helloFor(s, token));
      sock.sendAll(mine.data(), mine.size(), deadline, options_.rank, "rank " + std::to_string(peer.rank));
    }
    makeNonBlocking(sock.fd());
    p->stream(s).fd = sock.release();
  }
  proxy_->add(p);
  peers_.push_back(p);
  return std::make_unique<TcpConnection>(p, local_);
}

void TcpTransport::connected() {
  early_.clear();
  listener_.close();
  proxy_->start();
  sayGoodbyeAtExit(this);
}

}  // namespace forestcc::tcp
