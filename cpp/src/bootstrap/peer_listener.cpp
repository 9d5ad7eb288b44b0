#include "bootstrap/peer_listener.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

PeerListener::PeerListener(Socket listener, int rank, int nranks, uint64_t magic, double timeoutSeconds)
    : listener_(std::move(listener)), rank_(rank), nranks_(nranks), magic_(magic), timeout_(timeoutSeconds),
      ownerPid_(getpid()) {
  if (pipe2(stop_, O_CLOEXEC) != 0) throwSystemError("pipe2", errno, rank);
  thread_ = std::thread([this] { loop(); });
}

PeerListener::~PeerListener() {
  if (thread_.joinable()) {
    // A forked child has a copy of this object but not the thread: there is nothing to stop.
    if (getpid() != ownerPid_) {
      thread_.detach();
    } else {
      char b = 1;
      while (write(stop_[1], &b, 1) < 0 && errno == EINTR) {
      }
      thread_.join();
    }
  }
  for (int fd : stop_)
    if (fd >= 0) close(fd);
}

Socket PeerListener::take(int peer, const Deadline& deadline) {
  std::unique_lock<std::mutex> g(mu_);
  // In slices of 100 ms with a cancel flag, which ends the wait (Aborted), or interruptible.
  while (!arrivedCv_.wait_until(g, deadline.sliced() ? std::min(deadline.at, Clock::now() + std::chrono::milliseconds(100))
                                                     : deadline.at,
                                [&] { return arrived_.count(peer) > 0; })) {
    if (deadline.cancelled() || deadline.expired()) break;
    if (deadline.interruptible) {
      g.unlock();  // the listener's thread takes it; a signal handler may run
      checkInterrupt();
      g.lock();
    }
  }
  auto it = arrived_.find(peer);
  if (it == arrived_.end()) {
    g.unlock();
    if (deadline.cancelled()) deadline.check(rank_, peer, "waiting for rank " + std::to_string(peer) + " to connect");
    return Socket();
  }
  Socket s = std::move(it->second);
  arrived_.erase(it);
  return s;
}

std::string PeerListener::failure() {
  std::lock_guard<std::mutex> g(mu_);
  return failure_;
}

uint32_t PeerListener::judge(const Hello& h) {
  if (!h.fromJob(magic_) || (h.kind != kHelloPeer && h.kind != kHelloRendezvous)) return kWrongMagic;
  if (h.nranks != nranks_) return kSizeMismatch;
  if (h.rank < 0 || h.rank >= nranks_ || h.rank == rank_) return kBadRank;
  // A rendezvous hello now: the rendezvous is over, so every rank, this one included, has joined.
  if (h.kind == kHelloRendezvous || known_.count(h.rank)) return kDuplicateRank;
  known_.insert(h.rank);
  return kOk;
}

void PeerListener::answer(Socket s, const Hello& h) {
  uint32_t status;
  {
    std::lock_guard<std::mutex> g(mu_);
    status = judge(h);
  }
  try {
    // The first bytes on a fresh connection: they fit in its send buffer, nothing waits here.
    s.sendAll(&status, sizeof status, Deadline::in(1.0), rank_, "a connecting process");
  } catch (const Error&) {
    if (status != kOk) return;
    std::lock_guard<std::mutex> g(mu_);
    known_.erase(h.rank);  // it left before hearing the answer
    return;
  }
  if (status != kOk) {
    if (config::debug())
      fprintf(stderr, "%srefused a connection claiming rank %d of %d: %s\n", rankPrefix(rank_).c_str(), h.rank,
              h.nranks, helloStatusText(status));
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    arrived_[h.rank] = std::move(s);
  }
  arrivedCv_.notify_all();
}

void PeerListener::loop() {
  // Connections whose hello has not fully arrived: several at once, so that one silent client (a
  // port scanner, a process stopped in a debugger) cannot hold up the ranks behind it.
  struct Pending {
    Socket s;
    Hello h;
    size_t got;
    Deadline until;
  };
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  auto noteFailure = [&](const std::string& what) {
    std::lock_guard<std::mutex> g(mu_);
    failure_ = what;
  };
  while (true) {
    fds.assign({pollfd{stop_[0], POLLIN, 0}, pollfd{listener_.fd(), POLLIN, 0}});
    int waitMs = -1;
    for (const Pending& p : pending) {
      fds.push_back(pollfd{p.s.fd(), POLLIN, 0});
      waitMs = waitMs < 0 ? p.until.remainingMs() : std::min(waitMs, p.until.remainingMs());
    }
    int rc = ::poll(fds.data(), fds.size(), waitMs);
    if (rc < 0) {
      if (errno == EINTR) continue;
      noteFailure(std::string("poll: ") + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (fds[0].revents) return;
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (fds[i + 2].revents) {
        ssize_t n = ::recv(p.s.fd(), reinterpret_cast<char*>(&p.h) + p.got, sizeof p.h - p.got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) continue;  // gone
        if (n > 0) p.got += static_cast<size_t>(n);
        if (p.got == sizeof p.h) {
          answer(std::move(p.s), p.h);
          continue;
        }
      }
      if (!p.until.expired()) still.push_back(std::move(p));
    }
    pending = std::move(still);
    if (fds[1].revents) {
      try {
        pending.push_back(Pending{listener_.accept(Deadline::in(0), rank_), Hello{}, 0,
                                  Deadline::in(std::min(timeout_, 10.0))});
      } catch (const Error& e) {
        if (e.code() != ErrorCode::Timeout) {  // out of descriptors, say: keep trying, slowly
          noteFailure(e.what());
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    }
  }
}

}  // namespace forestcc
