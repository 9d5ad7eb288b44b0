#include "transport/tcp/tcp_peer.hpp"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "forestcc/error.hpp"
#include "transport/doorbell.hpp"
#include "transport/stamp_seqlock.hpp"
#include "transport/tcp/exposure.hpp"

namespace forestcc::tcp {

namespace {

std::string hex(uint64_t x) {
  std::ostringstream o;
  o << "0x" << std::hex << x;
  return o.str();
}

template <class T>
std::string bytesOf(const T& x) {
  return std::string(reinterpret_cast<const char*>(&x), sizeof x);
}

}  // namespace

TcpPeer::TcpPeer(LocalSide local, int peer, std::string who, int streams)
    : local_(std::move(local)), peer_(peer), who_(std::move(who)) {
  for (int s = 0; s < streams; ++s) streams_.push_back(std::make_unique<Stream>());
}

TcpPeer::~TcpPeer() {
  // Bytes left unread at close make the kernel reset the connection instead of closing it: read
  // what has arrived first (a bounded amount), so the peer sees an orderly end.
  char sink[64 << 10];
  for (auto& st : streams_) {
    if (st->fd < 0) continue;
    ::shutdown(st->fd, SHUT_WR);
    for (int i = 0; i < 256 && ::recv(st->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
    ::close(st->fd);
  }
}

// ---- worker threads ---------------------------------------------------------------------------

void TcpPeer::queue(int s, Outgoing o) {
  Stream& st = *streams_[s];
  if (o.header.type == MessageType::Put) ++st.piecesQueued;
  st.queue.push_back(std::move(o));
  st.queued.fetch_add(1, std::memory_order_release);
}

std::string TcpPeer::snapshotCounts() {
  // One stream keeps everything in order by itself.
  if (streams_.size() == 1) return {};
  std::string body(sizeof(uint64_t) * streams_.size(), '\0');
  for (size_t s = 0; s < streams_.size(); ++s)
    std::memcpy(&body[s * sizeof(uint64_t)], &streams_[s]->piecesQueued, sizeof(uint64_t));
  return body;
}

void TcpPeer::put(uint64_t address, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  if (dead()) throw Error(ErrorCode::Remote, rankPrefix(local_.rank) + "put to " + who_ + ": " + deadWhy_, local_.rank, peer_);
  const char* from = static_cast<const char*>(src);
  const uint64_t n = streams_.size();
  {
    std::lock_guard<std::mutex> g(mu_);
    // Small puts go on stream 0 with the signal that follows them (one socket, one wake-up);
    // large ones are cut into pieces of at least kMinPieceBytes, one per stream in turn.
    const uint64_t piece = bytes <= kMinPieceBytes ? bytes : std::max(kMinPieceBytes, (bytes + n - 1) / n);
    for (uint64_t off = 0; off < bytes; off += piece) {
      Outgoing o;
      o.header.type = MessageType::Put;
      o.header.a = address + off;
      o.header.c = std::min(piece, bytes - off);
      o.data = from + off;
      o.dataBytes = o.header.c;
      queue(piece == bytes ? 0 : static_cast<int>(nextStream_++ % n), std::move(o));
    }
  }
  wake_();
}

void TcpPeer::sendControl(MessageType type, std::string body, uint64_t a, uint64_t b, uint8_t set) {
  {
    std::lock_guard<std::mutex> g(mu_);
    Outgoing o;
    o.header.type = type;
    o.header.set = set;
    o.header.a = a;
    o.header.b = b;
    if (type == MessageType::Signal || type == MessageType::GetDone) body = snapshotCounts();
    o.header.bodyBytes = static_cast<uint32_t>(body.size());
    o.body = std::move(body);
    queue(0, std::move(o));
  }
  wake_();
}

void TcpPeer::signal(SemaphoreSet set, int index) {
  if (dead()) throw Error(ErrorCode::Remote, rankPrefix(local_.rank) + "signal to " + who_ + ": " + deadWhy_, local_.rank, peer_);
  sendControl(MessageType::Signal, {}, static_cast<uint64_t>(index), 0, static_cast<uint8_t>(set));
}

template <class Ready>
void TcpPeer::waitFor(Ready ready, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(local_.timeout));
  const ControlHeader& h = local_.control->header;
  for (int round = 0;; ++round) {
    if (ready()) return;
    if (dead()) throw Error(ErrorCode::Remote, rankPrefix(local_.rank) + what + ": " + deadWhy_, local_.rank, peer_);
    if (left_.load(std::memory_order_acquire))
      throw Error(ErrorCode::Remote,
                  rankPrefix(local_.rank) + what + ": " + who_ +
                      " left the job (it destroyed its communicator or its process ended) before it was done",
                  local_.rank, peer_);
    if (h.abortBy.load(std::memory_order_acquire)) {
      std::string reason = h.messageReady.load(std::memory_order_acquire) ? std::string(h.abortMessage) : "";
      throw Error(ErrorCode::Aborted,
                  rankPrefix(local_.rank) + what + " aborted: the communicator was poisoned; rank " +
                      std::to_string(h.abortBy.load() - 1) + " reported: " + reason,
                  local_.rank, peer_);
    }
    if (Clock::now() > deadline) {
      std::ostringstream m;
      m << rankPrefix(local_.rank) << what << ": timed out after " << local_.timeout << " s waiting for " << who_
        << " (FORESTCC_TIMEOUT sets the limit)";
      throw Error(ErrorCode::Timeout, m.str(), local_.rank, peer_);
    }
    if (round < 64) {
      sched_yield();
      continue;
    }
    waiters_.fetch_add(1);
    {
      std::unique_lock<std::mutex> l(cvMu_);
      if (!ready()) cv_.wait_for(l, std::chrono::milliseconds(2));
    }
    waiters_.fetch_sub(1);
  }
}

void TcpPeer::notify() {
  if (waiters_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> l(cvMu_);
  cv_.notify_all();
}

void TcpPeer::flush() {
  uint64_t want[kMaxStreams];
  for (size_t s = 0; s < streams_.size(); ++s) want[s] = streams_[s]->queued.load(std::memory_order_acquire);
  waitFor(
      [&] {
        for (size_t s = 0; s < streams_.size(); ++s)
          if (streams_[s]->sentCount.load(std::memory_order_acquire) < want[s]) return false;
        return true;
      },
      "flush of puts to " + who_);
}

void TcpPeer::get(void* dst, uint64_t address, uint64_t bytes) {
  if (bytes == 0) return;
  // The answer arrives as puts into `dst`: offered only while this get runs.
  auto offer = local_.exposure->expose(reinterpret_cast<uint64_t>(dst), bytes);
  const uint64_t to = reinterpret_cast<uint64_t>(dst);
  uint64_t id;
  {
    std::lock_guard<std::mutex> g(mu_);
    id = nextGet_++;
    gets_[id] = 0;
    Outgoing o;
    o.header.type = MessageType::GetRequest;
    o.header.a = id;
    o.header.b = address;
    o.header.c = bytes;
    o.body = bytesOf(to);
    o.header.bodyBytes = sizeof to;
    queue(0, std::move(o));
  }
  wake_();
  int state = 0;
  auto done = [&] {
    std::lock_guard<std::mutex> g(mu_);
    state = gets_[id];
    return state != 0;
  };
  const std::string what = "get of " + std::to_string(bytes) + " bytes at " + hex(address) + " from " + who_;
  try {
    waitFor(done, what);
  } catch (...) {
    std::lock_guard<std::mutex> g(mu_);
    gets_.erase(id);
    throw;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    gets_.erase(id);
  }
  if (state == 2)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(local_.rank) + what + ": the peer refused it (not memory it offered for this call)",
                local_.rank, peer_);
}

uint64_t* TcpPeer::inboundWord(SemaphoreSet set, int index) {
  switch (set) {
    case SemaphoreSet::Channel:
      return index >= 0 && index < kSemaphoreSlots ? &local_.control->slots[index].value : nullptr;
    case SemaphoreSet::Plan: return index >= 0 && index < kMaxPlanChannelsPerPeer ? &plan_[index].value : nullptr;
    case SemaphoreSet::SendReady: return &sendReady_.value;
    case SemaphoreSet::RecvDone: return &recvDone_.value;
  }
  return nullptr;
}

void TcpPeer::hello(const Hello& h) {
  banks_[0].store(h.banks[0], std::memory_order_relaxed);
  banks_[1].store(h.banks[1], std::memory_order_relaxed);
  hellos_.fetch_add(1, std::memory_order_release);
  notify();
}

uint64_t TcpPeer::bank(int b) {
  waitFor([&] { return hellos_.load(std::memory_order_acquire) > 0; }, "the hello of " + who_);
  return banks_[b].load(std::memory_order_relaxed);
}

// ---- the proxy thread -------------------------------------------------------------------------

void TcpPeer::markDead(const std::string& why) {
  if (dead_.load()) return;
  deadWhy_ = why;
  dead_.store(true, std::memory_order_release);
  storeAbort(local_.control->header, local_.rank, rankPrefix(local_.rank) + why, ErrorCode::Remote, 0);
  notify();
}

bool TcpPeer::pendingOutput(int s) {
  const Stream& st = *streams_[s];
  return st.queued.load(std::memory_order_acquire) != st.sentCount.load(std::memory_order_relaxed);
}

bool TcpPeer::send(int s) {
  Stream& st = *streams_[s];
  while (!st.blocked) {
    Outgoing* o;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (st.queue.empty()) return true;
      o = &st.queue.front();  // stays put while others push_back (a deque keeps references)
    }
    iovec iov[3];
    int parts = 0;
    uint64_t skip = o->sent;
    auto add = [&](const void* p, uint64_t len) {
      if (skip >= len) {
        skip -= len;
        return;
      }
      iov[parts].iov_base = const_cast<char*>(static_cast<const char*>(p) + skip);
      iov[parts].iov_len = len - skip;
      ++parts;
      skip = 0;
    };
    add(&o->header, sizeof o->header);
    add(o->body.data(), o->body.size());
    add(o->data, o->dataBytes);
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = parts;
    const ssize_t n = ::sendmsg(st.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        st.blocked = true;
        return true;
      }
      const int error = errno;
      // A peer that said goodbye and ended resets its sockets when it left bytes unread, and the
      // reset can be seen here, on a send, before its goodbye is read: that goodbye still waits on
      // stream 0 (queued data is read before the error). Read it first, or a peer that left would
      // be taken for a death and poison this communicator.
      if (!saidGoodbye()) {
        try {
          // Its stream 0 may end here and never be reported again (edge-triggered epoll).
          if (receive(0) == Received::Ended) ended(0);
        } catch (const std::exception&) {
        }
      }
      if (!saidGoodbye()) markDead(who_ + " broke its connection (" + std::strerror(error) + "): it died or its host went away");
      return false;
    }
    o->sent += static_cast<uint64_t>(n);
    if (o->sent == o->total()) {
      {
        std::lock_guard<std::mutex> g(mu_);
        st.queue.pop_front();
      }
      st.sentCount.fetch_add(1, std::memory_order_release);
      notify();
    }
  }
  return true;
}

TcpPeer::Received TcpPeer::receive(int s) {
  Stream& st = *streams_[s];
  for (;;) {
    char* to;
    uint64_t want;
    if (st.dataLeft) {
      to = st.discard ? discard_ : st.dataTo;
      want = st.discard ? std::min<uint64_t>(st.dataLeft, sizeof discard_) : st.dataLeft;
    } else if (st.headerGot < sizeof st.header) {
      to = reinterpret_cast<char*>(&st.header) + st.headerGot;
      want = sizeof st.header - st.headerGot;
    } else {
      to = &st.body[st.bodyGot];
      want = st.body.size() - st.bodyGot;
    }
    const ssize_t n = ::recv(st.fd, to, want, MSG_DONTWAIT);
    if (n == 0) return Received::Ended;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Received::More;
      return Received::Ended;
    }
    const uint64_t got = static_cast<uint64_t>(n);
    if (st.dataLeft) {
      st.dataLeft -= got;
      if (!st.discard) st.dataTo += got;
      if (st.dataLeft == 0) {
        st.piecesReceived.fetch_add(1, std::memory_order_release);
        applyControl();
      }
    } else if (st.headerGot < sizeof st.header) {
      st.headerGot += got;
      if (st.headerGot == sizeof st.header) {
        st.body.assign(st.header.bodyBytes, '\0');
        st.bodyGot = 0;
        if (st.header.bodyBytes == 0) dispatch(s);
      }
    } else {
      st.bodyGot += got;
      if (st.bodyGot == st.body.size()) dispatch(s);
    }
  }
}

void TcpPeer::dispatch(int s) {
  Stream& st = *streams_[s];
  const WireHeader h = st.header;
  st.headerGot = 0;
  const ControlHeader& ctl = local_.control->header;
  switch (h.type) {
    case MessageType::Put: {
      // A poisoned communicator takes nothing more: its calls have returned with an error, and
      // the caller may be reusing the buffers.
      const bool offered = local_.exposure->covers(h.a, h.c);
      st.discard = !offered || ctl.abortBy.load(std::memory_order_acquire) != 0;
      st.dataTo = reinterpret_cast<char*>(h.a);
      st.dataLeft = h.c;
      if (!offered)
        storeAbort(local_.control->header, local_.rank,
                   rankPrefix(local_.rank) + who_ + " put " + std::to_string(h.c) + " bytes at " + hex(h.a) +
                       ", memory this rank did not offer (a stale put, or the ranks' calls disagree)",
                   ErrorCode::Aborted, 0);
      if (h.c == 0) st.piecesReceived.fetch_add(1, std::memory_order_release);
      return;
    }
    case MessageType::Hello: {
      Hello hi{};
      std::memcpy(&hi, st.body.data(), std::min(sizeof hi, st.body.size()));
      hello(hi);
      return;
    }
    case MessageType::GetRequest: {
      uint64_t to = 0;
      std::memcpy(&to, st.body.data(), std::min(sizeof to, st.body.size()));
      const bool offered = local_.exposure->covers(h.b, h.c) && !ctl.abortBy.load(std::memory_order_acquire);
      if (offered) put(to, reinterpret_cast<const void*>(h.b), h.c);
      sendControl(MessageType::GetDone, {}, h.a, offered ? 1 : 2);
      return;
    }
    case MessageType::Abort:
      // At once, not behind data still in flight: the point is to wake this rank's waiters.
      storeAbort(local_.control->header, peer_, st.body, static_cast<ErrorCode>(h.b), h.a);
      notify();
      return;
    default: {
      // A goodbye may wait here behind a signal whose data is still on another stream; the
      // peer has said it all the same, so its stream 0 closing next is the end of the job, not
      // a death (lost() asks saidGoodbye()).
      if (h.type == MessageType::Goodbye) {
        goodbye_.store(true, std::memory_order_release);
        // Acknowledge it now: the sender waits for this ACK (TcpProxy::drain, SIOCOUTQ), and a
        // delayed ACK to a lone small segment costs it ~40 ms per communicator destroyed or exit.
        const int one = 1;
        ::setsockopt(st.fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      }
      Outgoing c;
      c.header = h;
      c.body = std::move(st.body);
      control_.push_back(std::move(c));
      applyControl();
      return;
    }
  }
}

bool TcpPeer::controlReady(const Outgoing& c) const {
  if (c.body.size() != sizeof(uint64_t) * streams_.size() ||
      (c.header.type != MessageType::Signal && c.header.type != MessageType::GetDone))
    return true;
  for (size_t s = 0; s < streams_.size(); ++s) {
    uint64_t need;
    std::memcpy(&need, &c.body[s * sizeof need], sizeof need);
    if (streams_[s]->piecesReceived.load(std::memory_order_acquire) < need) return false;
  }
  return true;
}

void TcpPeer::applyControl() {
  while (!control_.empty() && controlReady(control_.front())) {
    apply(control_.front().header, control_.front().body);
    control_.pop_front();
  }
  checkLeft();
}

void TcpPeer::ended(int s) {
  if (s != 0 || !saidGoodbye()) return;
  streamZeroEnded_ = true;
  checkLeft();
}

void TcpPeer::checkLeft() {
  if (!streamZeroEnded_ || !control_.empty() || left_.load(std::memory_order_relaxed)) return;
  left_.store(true, std::memory_order_release);
  ringDoorbell(local_.control->doorbell);  // a wait on the peer may sleep: it checks left() on waking
  notify();
}

bool TcpPeer::unacknowledged(int s) const {
  int bytes = 0;
  const int fd = streams_[s]->fd;
  return fd >= 0 && ::ioctl(fd, SIOCOUTQ, &bytes) == 0 && bytes > 0;
}

void TcpPeer::apply(const WireHeader& h, const std::string& body) {
  switch (h.type) {
    case MessageType::Signal: {
      uint64_t* word = inboundWord(static_cast<SemaphoreSet>(h.set), static_cast<int>(h.a));
      if (word) signalMapped(word, local_.control->doorbell);
      else
        storeAbort(local_.control->header, local_.rank,
                   rankPrefix(local_.rank) + who_ + " signalled semaphore " + std::to_string(h.a) + " of set " +
                       std::to_string(h.set) + ", which does not exist",
                   ErrorCode::Internal, 0);
      return;
    }
    case MessageType::Mailbox: {
      MailboxMessage m;
      if (body.size() < sizeof m) return;
      std::memcpy(&m, body.data(), sizeof m);
      for (int b = 0; b < 3; ++b) handles[b] = m.handles[b];
      const size_t count = std::min<size_t>(m.offsetCount, kMaxVariableBlocks + 1);
      if (count && body.size() >= sizeof m + 2 * count * sizeof(uint64_t))
        for (int b = 0; b < 2; ++b)
          std::memcpy(blockOffsets[b], body.data() + sizeof m + b * count * sizeof(uint64_t), count * sizeof(uint64_t));
      writeStamp(byCall[m.sequence % kStampHistory], m.stamp);
      if (m.eagerBank == 0 || m.eagerBank == 1) writeStamp(byEagerCall[m.eagerBank], m.eagerStamp);
      sequence.store(m.sequence, std::memory_order_release);
      ringDoorbell(local_.control->doorbell);  // a wait for this entry may sleep
      return;
    }
    case MessageType::GetDone: {
      {
        std::lock_guard<std::mutex> g(mu_);
        auto it = gets_.find(h.a);
        if (it != gets_.end()) it->second = static_cast<int>(h.b);
      }
      notify();  // never under mu_: a waiter checks its condition (which takes mu_) under cvMu_
      return;
    }
    case MessageType::SendPost:
      std::memcpy(static_cast<void*>(&sendPost), body.data(), std::min(sizeof sendPost, body.size()));
      return;
    case MessageType::SendAnswer: sendAnswer.store(static_cast<int64_t>(h.a), std::memory_order_release); return;
    case MessageType::Goodbye: goodbye_.store(true, std::memory_order_release); return;
    default: return;
  }
}

}  // namespace forestcc::tcp
