// Rendezvous (every rank connects to rank 0), allGather/barrier as a star through rank 0, and
// direct point-to-point blobs between ranks over lazily opened connections, which each rank's
// PeerListener accepts (or refuses, saying why) from the end of the rendezvous on.
#include "forestcc/bootstrap.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>

#include "bootstrap/file_rendezvous.hpp"
#include "bootstrap/hello.hpp"
#include "bootstrap/peer_listener.hpp"
#include "bootstrap/root_sockets.hpp"
#include "bootstrap/socket.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

constexpr uint64_t kAbortSeq = ~0ull;

struct FrameHeader {
  uint64_t key;  // sequence number (star) or tag (point-to-point)
  uint64_t length;
};

std::string who(int peer) { return "rank " + std::to_string(peer); }

std::string seconds(double t) {
  std::ostringstream o;
  o << t;
  return o.str();
}

std::string packBlobs(const std::vector<std::string>& blobs) {
  std::string out;
  uint64_t n = blobs.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  for (auto& b : blobs) {
    uint64_t len = b.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
  }
  for (auto& b : blobs) out += b;
  return out;
}

std::vector<std::string> unpackBlobs(const std::string& in) {
  uint64_t n;
  std::memcpy(&n, in.data(), 8);
  std::vector<std::string> out(n);
  size_t off = 8 + 8 * n;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len;
    std::memcpy(&len, in.data() + 8 + 8 * i, 8);
    out[i] = in.substr(off, len);
    off += len;
  }
  return out;
}

}  // namespace

struct Bootstrap::Impl {
  Impl(int r, int n, const UniqueId& i, double t, std::shared_ptr<const std::atomic<bool>> c)
      : rank(r), nranks(n), id(i), timeout(t), cancelFlag(std::move(c)) {}
  int rank;
  int nranks;
  UniqueId id;
  double timeout;
  // Set: every wait of this bootstrap ends (Bootstrap's constructor). Shared: the flag lives as
  // long as the bootstrap, whoever set it.
  std::shared_ptr<const std::atomic<bool>> cancelFlag;
  const std::atomic<bool>* cancel() const { return cancelFlag.get(); }
  std::mutex mu;
  Socket listener;                  // until the rendezvous is over; then peers owns it
  std::unique_ptr<PeerListener> peers;
  Socket toRoot;                    // non-root ranks
  std::vector<Socket> fromRanks;    // rank 0: one connection per rank
  std::vector<std::string> listenAddrs;
  uint64_t seq = 0;
  std::map<int, Socket> outgoing, incoming;
  std::map<std::pair<int, uint64_t>, std::deque<std::string>> stash;

  // Interruptible (Ctrl-C in Python ends a bootstrap wait): an operation abandoned part-way
  // breaks the bootstrap (guarded), not a later operation's data.
  Deadline deadline() const { return interruptible(Deadline::in(timeout, cancel())); }
  // Non-root ranks wait longer than rank 0 for its replies: when rank 0 gives up it sends the
  // reason (which ranks are missing), and that reason should reach them before their own deadline.
  Deadline starDeadline() const {
    return interruptible(Deadline::in(timeout + std::max(1.0, timeout * 0.5), cancel()));
  }
  static Deadline interruptible(Deadline d) {
    d.interruptible = true;
    return d;
  }
  // Runs one operation; one interrupted by a signal leaves frames half read or unanswered on
  // either side, so every later one is refused (rather than read another operation's data).
  std::string interruptedBy;  // the operation a signal interrupted: the bootstrap is broken
  template <class F>
  auto guarded(const char* operation, F&& f) {
    if (!interruptedBy.empty())
      throw Error(ErrorCode::Aborted, rankPrefix(rank) + "bootstrap " + operation + ": a signal interrupted this "
                                          "communicator's bootstrap " + interruptedBy + ", whose messages may be half "
                                          "read; it exchanges nothing more (make a new communicator)",
                  rank);
    try {
      return f();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Interrupted) {
        interruptedBy = operation;
        closeConnections();
      }
      throw;
    }
  }
  // A broken bootstrap closes its connections, so that a peer reading from this rank (a star
  // exchange through rank 0, a recv over a connection already open) learns it at once, not at its
  // timeout. Nothing is written to them first: a frame may have been cut off half sent.
  void closeConnections() {
    toRoot.close();
    for (Socket& s : fromRanks) s.close();
    for (auto& [peer, s] : outgoing) s.close();
    for (auto& [peer, s] : incoming) s.close();
  }

  void writeFrame(Socket& s, uint64_t key, const std::string& data, int peer) {
    FrameHeader h{key, data.size()};
    auto d = deadline();
    s.sendAll(&h, sizeof h, d, rank, who(peer));
    if (!data.empty()) s.sendAll(data.data(), data.size(), d, rank, who(peer));
  }

  std::string readPayload(Socket& s, uint64_t length, const Deadline& d, int peer) {
    std::string data(length, '\0');
    if (length) s.recvAll(data.data(), length, d, rank, who(peer), peer);
    return data;
  }

  // ---- rendezvous ----
  void rootRendezvous(int listenFd) {
    if (listenFd >= 0) {
      listener = Socket(listenFd);
    } else {
      listener = RootSockets::instance().take(id.magic());
      if (!listener.valid()) listener = Socket::listen(uniqueIdAddress(id));
    }
    fromRanks.resize(nranks);
    listenAddrs.assign(nranks, "");
    listenAddrs[0] = listener.localAddress().toString();
    int arrived = 1;
    Deadline d = deadline();
    while (arrived < nranks) {
      Socket s;
      try {
        s = listener.accept(d, rank);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Aborted) abortAll(e.what());  // the ranks that joined learn it at once
        if (e.code() != ErrorCode::Timeout) throw;
        std::string missing;
        for (int r = 1; r < nranks; ++r)
          if (!fromRanks[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        std::ostringstream msg;
        msg << rankPrefix(rank) << "bootstrap timed out after " << timeout << " s: rank(s) " << missing
            << " of " << nranks << " never connected to " << listenAddrs[0]
            << " (raise FORESTCC_TIMEOUT if they start slowly)";
        abortAll(msg.str());
        throw Error(ErrorCode::Timeout, msg.str(), rank);
      }
      Hello h;
      try {
        s.recvAll(&h, sizeof h, Deadline::in(std::min(timeout, 10.0), cancel()), rank, "a connecting process");
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Aborted) {
          abortAll(e.what());
          throw;
        }
        continue;  // a port scanner or a dead client: ignore it
      }
      uint32_t status = kOk;
      if (!h.fromJob(id.magic()) || h.kind != kHelloRendezvous) status = kWrongMagic;
      else if (h.nranks != nranks) status = kSizeMismatch;
      else if (h.rank <= 0 || h.rank >= nranks) status = kBadRank;
      else if (fromRanks[h.rank].valid()) status = kDuplicateRank;
      try {
        s.sendAll(&status, sizeof status, d, rank, who(h.rank));
      } catch (const Error&) {
        continue;
      }
      if (status != kOk) {
        if (config::debug())
          fprintf(stderr, "%srefused a connection claiming rank %d: %s\n", rankPrefix(rank).c_str(), h.rank,
                  helloStatusText(status));
        continue;
      }
      // The peer listens on the address it used to reach us, at the port it announced.
      sockaddr_storage peerAddr{};
      socklen_t len = sizeof peerAddr;
      getpeername(s.fd(), reinterpret_cast<sockaddr*>(&peerAddr), &len);
      SocketAddress a;
      a.storage = peerAddr;
      a.length = len;
      std::string host = a.toString();
      host = host.substr(0, host.rfind(':'));
      listenAddrs[h.rank] = host + ":" + std::to_string(h.listenPort);
      fromRanks[h.rank] = std::move(s);
      ++arrived;
    }
    std::string table = packBlobs(listenAddrs);
    for (int r = 1; r < nranks; ++r) writeFrame(fromRanks[r], 0, table, r);
  }

  void joinRendezvous(double connectTimeout) {
    SocketAddress rootAddr = uniqueIdAddress(id);
    toRoot = Socket::connect(rootAddr, Deadline::in(connectTimeout, cancel()), rank, "rank 0");
    SocketAddress mine = toRoot.localAddress();
    std::string host = mine.toString();
    host = host.substr(0, host.rfind(':'));
    listener = Socket::listen(SocketAddress::parse(host + ":0"));
    Hello h = Hello::of(kHelloRendezvous, id.magic(), rank, nranks);
    h.listenPort = listener.localAddress().port();
    Deadline d = starDeadline();
    toRoot.sendAll(&h, sizeof h, d, rank, "rank 0");
    uint32_t status = kOk;
    toRoot.recvAll(&status, sizeof status, d, rank, "rank 0 at " + rootAddr.toString(), 0);
    if (status != kOk)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + "rank 0 at " + rootAddr.toString() + " refused this rank: " +
                      helloStatusText(status),
                  rank, 0);
    listenAddrs = unpackBlobs(readStar(d));
  }

  // ---- star through rank 0 ----
  void abortAll(const std::string& message) {
    for (int r = 1; r < nranks; ++r) {
      if (!fromRanks[r].valid()) continue;
      try {
        FrameHeader h{kAbortSeq, message.size()};
        Deadline d = Deadline::in(1.0);
        fromRanks[r].sendAll(&h, sizeof h, d, rank, who(r));
        fromRanks[r].sendAll(message.data(), message.size(), d, rank, who(r));
      } catch (const Error&) {
      }
    }
  }

  std::string readStar(const Deadline& d) {
    FrameHeader h;
    toRoot.recvAll(&h, sizeof h, d, rank, "rank 0", 0);
    std::string payload = readPayload(toRoot, h.length, d, 0);
    if (h.key == kAbortSeq) throw Error(ErrorCode::Remote, rankPrefix(rank) + "rank 0 aborted the job: " + payload, rank, 0);
    return payload;
  }

  std::vector<std::string> allGather(const std::string& mine) {
    uint64_t s = ++seq;
    Deadline d = deadline();
    if (rank != 0) {
      writeFrame(toRoot, s, mine, 0);
      return unpackBlobs(readStar(starDeadline()));
    }
    std::vector<std::string> all(nranks);
    all[0] = mine;
    for (int r = 1; r < nranks; ++r) {
      try {
        FrameHeader h;
        fromRanks[r].recvAll(&h, sizeof h, d, rank, who(r), r);
        all[r] = readPayload(fromRanks[r], h.length, d, r);
        if (h.key != s) {
          std::string msg = rankPrefix(rank) + "bootstrap operations out of step: rank " + std::to_string(r) +
                            " is at operation #" + std::to_string(h.key) + ", rank 0 at #" + std::to_string(s);
          abortAll(msg);
          throw Error(ErrorCode::Internal, msg, rank, r);
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Internal) throw;
        std::string missing = std::to_string(r);
        for (int q = r + 1; q < nranks; ++q)
          if (!fromRanks[q].readable(0)) missing += ", " + std::to_string(q);
        std::string msg = e.code() == ErrorCode::Timeout
                              ? rankPrefix(rank) + "timed out after " + seconds(timeout) +
                                    " s in a bootstrap collective waiting for rank(s) " + missing
                              : std::string(e.what());
        abortAll(msg);
        throw Error(e.code(), msg, rank, r);
      }
    }
    std::string packed = packBlobs(all);
    for (int r = 1; r < nranks; ++r) writeFrame(fromRanks[r], s, packed, r);
    return all;
  }

  // ---- point to point ----
  // The other side answers every hello at once (PeerListener), so waiting for the answer cannot
  // block on what that rank's own thread is doing; a process of another job listening at the
  // address (the peer exited and its port was reused) is caught here, not by a timeout later.
  Socket& outgoingTo(int peer) {
    auto it = outgoing.find(peer);
    if (it != outgoing.end()) return it->second;
    Deadline d = deadline();
    const std::string there = who(peer) + " at " + listenAddrs[peer];
    Socket s = Socket::connect(SocketAddress::parse(listenAddrs[peer]), d, rank, there);
    const Hello h = Hello::of(kHelloPeer, id.magic(), rank, nranks);
    s.sendAll(&h, sizeof h, d, rank, there);
    uint32_t status = kOk;
    s.recvAll(&status, sizeof status, d, rank, there, peer);
    if (status == kWrongMagic)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + "the process at " + listenAddrs[peer] + ", " + who(peer) +
                      "'s address in this job, refused a connection from this rank: wrong magic: it belongs to "
                      "another job (did " + who(peer) + " exit and another job take its port?)",
                  rank, peer);
    if (status != kOk)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + who(peer) + " at " + listenAddrs[peer] + " refused a connection from this rank: " +
                      helloStatusText(status),
                  rank, peer);
    return outgoing[peer] = std::move(s);
  }

  Socket& incomingFrom(int peer, const Deadline& d) {
    auto it = incoming.find(peer);
    if (it != incoming.end()) return it->second;
    Socket s = peers->take(peer, d);
    if (!s.valid()) {
      std::string failure = peers->failure();
      throw Error(ErrorCode::Timeout,
                  rankPrefix(rank) + "timed out after " + seconds(timeout) + " s waiting for rank " +
                      std::to_string(peer) + " to connect" +
                      (failure.empty() ? "" : " (accepting connections failed: " + failure + ")"),
                  rank, peer);
    }
    return incoming[peer] = std::move(s);
  }

  void checkPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= nranks)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + what + ": peer " + std::to_string(peer) +
                                               " is out of range (0.." + std::to_string(nranks - 1) + ")", rank, peer);
  }

  void send(int peer, uint64_t tag, const std::string& data) {
    checkPeer(peer, "send");
    if (peer == rank) {  // to ourselves: no socket needed
      stash[{peer, tag}].push_back(data);
      return;
    }
    writeFrame(outgoingTo(peer), tag, data, peer);
  }

  std::string recv(int peer, uint64_t tag) {
    checkPeer(peer, "recv");
    auto key = std::make_pair(peer, tag);
    auto it = stash.find(key);
    if (it != stash.end() && !it->second.empty()) {
      std::string v = std::move(it->second.front());
      it->second.pop_front();
      return v;
    }
    Deadline d = deadline();
    Socket& s = incomingFrom(peer, d);
    while (true) {
      FrameHeader h;
      try {
        s.recvAll(&h, sizeof h, d, rank, who(peer), peer);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::Timeout) throw;
        throw Error(ErrorCode::Timeout, rankPrefix(rank) + "timed out after " + seconds(timeout) +
                                            " s waiting for a message from rank " + std::to_string(peer),
                    rank, peer);
      }
      std::string data = readPayload(s, h.length, d, peer);
      if (h.key == tag) return data;
      stash[{peer, h.key}].push_back(std::move(data));
    }
  }
};

Bootstrap::Bootstrap(int rank, int nranks, const UniqueId& id, double timeoutSeconds, int rootListenFd,
                     double connectTimeoutSeconds, std::shared_ptr<const std::atomic<bool>> cancel)
    // init(timeout=inf): the longest a deadline can count (config::kMaxTimeoutSeconds), for every
    // wait of the communicator made over it too (Communicator::State::timeout).
    : impl_(std::make_unique<Impl>(rank, nranks, id, std::min(timeoutSeconds, config::kMaxTimeoutSeconds),
                                   std::move(cancel))) {
  if (nranks < 1)
    throw Error(ErrorCode::InvalidUsage, "forestcc: nranks must be at least 1, got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks)
    throw Error(ErrorCode::InvalidUsage, "forestcc: rank " + std::to_string(rank) + " is out of range for " +
                                             std::to_string(nranks) + " ranks");
  if (rank == 0) impl_->rootRendezvous(rootListenFd);
  else impl_->joinRendezvous(connectTimeoutSeconds > 0 ? std::min(connectTimeoutSeconds, impl_->timeout) : impl_->timeout);
  impl_->peers = std::make_unique<PeerListener>(std::move(impl_->listener), rank, nranks, impl_->id.magic(),
                                                impl_->timeout);
}

std::unique_ptr<Bootstrap> Bootstrap::fromEnvironment(double timeoutSeconds) {
  LaunchInfo info = detectLaunch();
  requireRendezvous(info);
  if (!info.rootAddress.empty()) {
    UniqueId id = UniqueId::fromAddress(info.rootAddress, info.magic);
    if (info.rootListenFd >= 0) unsetenv("FORESTCC_ROOT_FD");  // the first communicator owns it
    return std::make_unique<Bootstrap>(info.rank, info.size, id, timeoutSeconds, info.rootListenFd);
  }
  if (info.size == 1) return std::make_unique<Bootstrap>(0, 1, UniqueId::create(), timeoutSeconds);
  return joinThroughFile(info, timeoutSeconds);
}

Bootstrap::~Bootstrap() = default;
int Bootstrap::rank() const { return impl_->rank; }
int Bootstrap::nranks() const { return impl_->nranks; }
double Bootstrap::timeoutSeconds() const { return impl_->timeout; }
uint64_t Bootstrap::magic() const { return impl_->id.magic(); }
const UniqueId& Bootstrap::id() const { return impl_->id; }

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->guarded("all_gather", [&] { return impl_->allGather(mine); });
}

void Bootstrap::barrier() { allGather(std::string()); }

void Bootstrap::send(int peer, uint64_t tag, const std::string& data) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->guarded("send", [&] { impl_->send(peer, tag, data); });
}

std::string Bootstrap::recv(int peer, uint64_t tag) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->guarded("recv", [&] { return impl_->recv(peer, tag); });
}

}  // namespace forestcc
