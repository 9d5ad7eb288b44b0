// Which local address the tcp transport listens on. FORESTCC_SOCKET_IFNAME takes the syntax NCCL
// users know: a comma-separated list of name prefixes ("eth,ib"), "=" for exact names
// ("=eth0,eth1"), "^" to exclude ("^docker,lo"); a spec that matches no interface is an error at
// init that lists the interfaces this host has. Without it, the address this host uses to reach
// rank 0 (the rendezvous) is the one peers will reach too.
#pragma once

#include <string>
#include <vector>

#include "bootstrap/socket.hpp"

namespace forestcc::tcp {

struct Interface {
  std::string name;       // "eth0"
  SocketAddress address;  // its IPv4 or IPv6 address, port 0
};

// Every up interface with an IPv4 or IPv6 address (IPv6 link-local ones left out: they need a
// scope to be reached, and are what users trip over), loopback included.
std::vector<Interface> localInterfaces();
// The interfaces `spec` selects, in the host's order. Throws InvalidUsage naming the spec and the
// interfaces that exist when it selects none.
std::vector<Interface> selectInterfaces(const std::string& spec, int rank);
// The local address a connection to `remote` leaves from (the routing table's choice), port 0.
SocketAddress routeTo(const SocketAddress& remote, int rank);

}  // namespace forestcc::tcp
