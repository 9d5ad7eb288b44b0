#include "transport/tcp/interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "forestcc/error.hpp"

namespace forestcc::tcp {

namespace {

bool linkLocal6(const sockaddr* sa) {
  if (sa->sa_family != AF_INET6) return false;
  const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
  return IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr);
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string hostOnly(const SocketAddress& a) {
  std::string s = a.toString();
  return s.substr(0, s.rfind(':'));
}

}  // namespace

std::vector<Interface> localInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if ((family != AF_INET && family != AF_INET6) || linkLocal6(i->ifa_addr)) continue;
    Interface itf;
    itf.name = i->ifa_name;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&itf.address.storage, i->ifa_addr, len);
    itf.address.length = len;
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

std::vector<Interface> selectInterfaces(const std::string& spec, int rank) {
  std::string rest = spec;
  const bool exclude = !rest.empty() && rest[0] == '^';
  if (exclude) rest = rest.substr(1);
  const bool exact = !rest.empty() && rest[0] == '=';
  if (exact) rest = rest.substr(1);
  const std::vector<std::string> names = splitList(rest);
  auto listed = [&](const std::string& name) {
    for (const auto& n : names)
      if (exact ? name == n : name.compare(0, n.size(), n) == 0) return true;
    return false;
  };
  const std::vector<Interface> all = localInterfaces();
  std::vector<Interface> out;
  for (const auto& itf : all)
    if (listed(itf.name) != exclude) out.push_back(itf);
  if (out.empty()) {
    std::string have;
    for (const auto& itf : all) have += (have.empty() ? "" : ", ") + itf.name + " (" + hostOnly(itf.address) + ")";
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(rank) + "FORESTCC_SOCKET_IFNAME='" + spec +
                    "' selects no interface of this host; it has: " + (have.empty() ? "none" : have) +
                    " (a list of name prefixes, '=' for exact names, '^' to exclude)",
                rank);
  }
  return out;
}

SocketAddress routeTo(const SocketAddress& remote, int rank) {
  // A UDP socket "connected" to the address sends nothing but asks the routing table which
  // local address it would leave from.
  const int fd = ::socket(remote.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorCode::System, rankPrefix(rank) + "socket(): " + std::strerror(errno), rank);
  SocketAddress local;
  local.length = sizeof local.storage;
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&remote.storage), remote.length) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local.storage), &local.length) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    throw Error(ErrorCode::System,
                rankPrefix(rank) + "no route to rank 0's address " + remote.toString() + ": " + std::strerror(err) +
                    " (set FORESTCC_SOCKET_IFNAME to the interface peers reach this host on)",
                rank);
  if (local.storage.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&local.storage)->sin_port = 0;
  else reinterpret_cast<sockaddr_in6*>(&local.storage)->sin6_port = 0;
  return local;
}

}  // namespace forestcc::tcp
