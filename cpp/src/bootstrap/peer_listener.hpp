// After the rendezvous, every rank keeps answering its listening socket on a thread of its own:
// a rank of this job opening a point-to-point connection is told "ok" and queued for recv(), and
// anything else (a process of another job, a stale unique id, a rank joining twice) is told why
// it is refused at once. Without it a stray process waited out its whole timeout, because the
// rank it reached was busy elsewhere and read its hello only when (if ever) it next called recv().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "bootstrap/hello.hpp"
#include "bootstrap/socket.hpp"

namespace forestcc {

class PeerListener {
 public:
  // Starts answering connections on `listener` (already listening) at once.
  PeerListener(Socket listener, int rank, int nranks, uint64_t magic, double timeoutSeconds);
  ~PeerListener();  // stops the thread; connections nobody took are closed
  PeerListener(const PeerListener&) = delete;
  PeerListener& operator=(const PeerListener&) = delete;

  // The connection `peer` opened to this rank, waiting for it until `deadline`; an invalid
  // Socket when it did not come in time.
  Socket take(int peer, const Deadline& deadline);
  // Why the listening socket could not accept, when it could not (empty otherwise).
  std::string failure();

 private:
  void loop();
  void answer(Socket s, const Hello& h);
  uint32_t judge(const Hello& h);  // under mu_; kOk reserves the rank

  Socket listener_;
  int rank_, nranks_;
  uint64_t magic_;
  double timeout_;
  int stop_[2] = {-1, -1};  // a pipe: a byte written to [1] ends loop()
  int ownerPid_;
  std::mutex mu_;
  std::condition_variable arrivedCv_;
  std::map<int, Socket> arrived_;  // accepted, not taken yet
  std::set<int> known_;            // ranks that have connected (taken or not)
  std::string failure_;
  std::thread thread_;
};

}  // namespace forestcc
