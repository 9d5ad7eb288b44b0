#include "transport/tcp/goodbye_at_exit.hpp"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "transport/tcp/tcp_transport.hpp"

namespace forestcc::tcp {

namespace {

struct Listed {
  std::mutex mu;
  std::map<TcpTransport*, pid_t> transports;  // the pid that made each
};

// Never destroyed: the handler runs among static destructors, in no order we choose. Constructed
// in place in static storage, so that a forked child can make itself a fresh one without
// allocating (the fork handler must be async-signal-safe: the child of a threaded parent may have
// inherited malloc's lock held).
alignas(Listed) unsigned char gStorage[sizeof(Listed)];
Listed* gListed = nullptr;
Listed& listed() {
  static std::once_flag made;
  std::call_once(made, [] {
    gListed = new (gStorage) Listed;
    // A child forked while another thread held `mu` would find it locked forever (its exit, and
    // any communicator it makes, would hang): the child constructs the registry afresh over the
    // old one, which is dropped as it is (its mutex may be held by a thread the child does not
    // have; its map's nodes stay allocated, unreachable). An empty std::map and a std::mutex are
    // made without allocating or calling into libc.
    pthread_atfork(nullptr, nullptr, [] { gListed = new (gStorage) Listed; });
  });
  return *gListed;
}

void atExit() {
  Listed& l = listed();
  std::lock_guard<std::mutex> g(l.mu);
  const pid_t self = getpid();
  // Every goodbye leaves before any is awaited: the waits overlap.
  for (auto& [transport, pid] : l.transports)
    if (pid == self) transport->sendGoodbye();
  // One bound for all of them: a host that went away must not hold the exit once per communicator.
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kGoodbyeSeconds);
  for (auto& [transport, pid] : l.transports)
    if (pid == self)
      transport->awaitDelivered(std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count());
}

}  // namespace

void sayGoodbyeAtExit(TcpTransport* transport) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(atExit); });
  Listed& l = listed();
  std::lock_guard<std::mutex> g(l.mu);
  l.transports[transport] = getpid();
}

void forgetAtExit(TcpTransport* transport) {
  Listed& l = listed();
  std::lock_guard<std::mutex> g(l.mu);
  l.transports.erase(transport);
}

}  // namespace forestcc::tcp
