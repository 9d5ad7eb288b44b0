// Listening sockets opened by UniqueId::create(), kept until rank 0 of this process joins, so the
// port cannot be taken by someone else between creating the id and using it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "bootstrap/socket.hpp"
#include "forestcc/bootstrap.hpp"

namespace forestcc {

class RootSockets {
 public:
  static RootSockets& instance();
  void keep(uint64_t magic, Socket s);
  Socket take(uint64_t magic);  // invalid Socket when none was kept

 private:
  std::mutex mu_;
  std::map<uint64_t, Socket> sockets_;
};

SocketAddress uniqueIdAddress(const UniqueId& id);

}  // namespace forestcc
