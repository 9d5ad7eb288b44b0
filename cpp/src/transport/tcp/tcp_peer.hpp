// One peer on the other end of a tcp connection: its sockets ("streams"), what this rank has
// queued for it, what arrived from it (its signals, its mailbox, its send posts), and the
// waits of this rank's threads on it (flush, get). Worker threads queue; the proxy thread
// (tcp_proxy.hpp) moves the bytes. The receiver never stages data: a put's bytes are read from
// the socket into their destination.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/connection.hpp"
#include "transport/tcp/wire.hpp"

namespace forestcc::tcp {

class Exposure;

// What this rank knows of itself that a peer's messages act on.
struct LocalSide {
  int rank = -1;
  int size = 1;
  ControlBlock* control = nullptr;  // this rank's: channel semaphores, poison
  double timeout = 300;             // FORESTCC_TIMEOUT: every wait here has this deadline
  std::shared_ptr<Exposure> exposure;  // which local memory peers may write and read
};

// A message on its way out: header, control body, then (puts) data read in place from memory
// that stays valid until a flush says it went.
struct Outgoing {
  WireHeader header{};
  std::string body;
  const char* data = nullptr;
  uint64_t dataBytes = 0;
  uint64_t sent = 0;  // of header + body + data
  uint64_t total() const { return sizeof header + body.size() + dataBytes; }
};

struct Stream {
  int fd = -1;
  // Send side: queued by any thread under TcpPeer::mu_, sent by the proxy.
  std::deque<Outgoing> queue;
  std::atomic<uint64_t> queued{0};      // messages ever queued
  std::atomic<uint64_t> sentCount{0};   // of them, sent whole
  uint64_t piecesQueued = 0;            // Put messages ever queued (signals carry these)
  bool blocked = false;                 // the socket was full: wait for it to drain (proxy only)
  // Receive side (proxy only).
  WireHeader header{};
  uint64_t headerGot = 0;
  std::string body;
  uint64_t bodyGot = 0;
  char* dataTo = nullptr;   // the put being received
  uint64_t dataLeft = 0;
  bool discard = false;     // its destination is not this rank's to write: read and drop
  bool inBody = false;
  std::atomic<uint64_t> piecesReceived{0};
};

class TcpPeer {
 public:
  TcpPeer(LocalSide local, int peer, std::string describePeer, int streams);
  ~TcpPeer();

  int peer() const { return peer_; }
  int streams() const { return static_cast<int>(streams_.size()); }
  Stream& stream(int s) { return *streams_[s]; }
  const std::string& who() const { return who_; }  // "rank 3 (10.0.0.2:4711)"
  void setWake(std::function<void()> wake) { wake_ = std::move(wake); }

  // ---- worker threads ----
  void put(uint64_t address, const void* src, uint64_t bytes);
  void signal(SemaphoreSet set, int index);
  void flush();
  void get(void* dst, uint64_t address, uint64_t bytes);
  void sendControl(MessageType type, std::string body, uint64_t a = 0, uint64_t b = 0, uint8_t set = 0);
  uint64_t* inboundWord(SemaphoreSet set, int index);
  // The peer's banks (waits for its Hello, which the proxy reads first on each socket).
  uint64_t bank(int b);
  // Its Hello arrived (read at accept, or by the proxy as the first message on a socket).
  void hello(const Hello& h);

  // What arrived from the peer (applied by the proxy, in order).
  std::atomic<uint64_t> sequence{0};
  CallStamp byCall[kStampHistory] = {};
  CallStamp byEagerCall[2] = {};
  MemoryHandle handles[3];
  uint64_t blockOffsets[2][kMaxVariableBlocks + 1] = {};
  MemoryHandle sendPost;
  std::atomic<int64_t> sendAnswer{0};

  // ---- the proxy thread ----
  // Reads what the socket has: Ended when the stream closed or failed (TcpProxy::lost decides
  // what that means for the peer).
  enum class Received { More, Ended };
  Received receive(int s);
  // Sends what is queued until the socket is full; false when the peer is gone.
  bool send(int s);
  bool pendingOutput(int s);
  // The peer's sockets closed: with its goodbye this is the end of the job, else it died.
  bool saidGoodbye() const { return goodbye_.load(std::memory_order_acquire); }
  // Stream s of a peer that said goodbye ended (TcpProxy::lost). Once stream 0 has ended and
  // every control message before the goodbye is applied, the peer has left: left() is set, and
  // a wait on it (WaitPolicy::peerLeft) fails instead of running to its deadline.
  void ended(int s);
  const std::atomic<bool>& left() const { return left_; }
  // Bytes of stream s that the peer's kernel has not acknowledged yet (SIOCOUTQ).
  bool unacknowledged(int s) const;
  void markDead(const std::string& why);
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  // Wakes this rank's waiters on the peer (flush, get).
  void notify();

 private:
  void queue(int s, Outgoing o);
  void dispatch(int s);              // a whole header (+ body) arrived on stream s
  void applyControl();               // in order, as far as the data they follow has arrived
  bool controlReady(const Outgoing& c) const;
  void checkLeft();                  // sets left_ once stream 0 ended and control_ is empty
  void apply(const WireHeader& h, const std::string& body);
  std::string snapshotCounts();      // pieces queued per stream (call under mu_)
  template <class Ready>
  void waitFor(Ready ready, const std::string& what);

  LocalSide local_;
  int peer_;
  std::string who_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::function<void()> wake_;
  std::mutex mu_;           // send queues, round robin, gets
  uint64_t nextStream_ = 0;
  std::condition_variable cv_;
  std::mutex cvMu_;
  std::atomic<int> waiters_{0};
  // Control messages received on stream 0, applied in order (proxy only).
  std::deque<Outgoing> control_;
  SemaphoreSlot plan_[kMaxPlanChannelsPerPeer] = {};
  SemaphoreSlot sendReady_{}, recvDone_{};
  std::atomic<uint64_t> banks_[2] = {};
  std::atomic<int> hellos_{0};
  uint64_t nextGet_ = 1;
  std::map<uint64_t, int> gets_;  // request id -> 0 running, 1 done, 2 refused by the peer
  std::atomic<bool> goodbye_{false};
  bool streamZeroEnded_ = false;  // after a goodbye (proxy only)
  std::atomic<bool> left_{false};
  std::atomic<bool> dead_{false};
  std::string deadWhy_;
  char discard_[64 << 10];
};

}  // namespace forestcc::tcp
