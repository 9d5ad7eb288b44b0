// The 128-byte unique id: layout, creation (with the root's listening socket kept for later) and
// parsing.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "bootstrap/root_sockets.hpp"
#include "bootstrap/socket.hpp"
#include "forestcc/bootstrap.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

// Layout: [0..3] "FCC1" | [4..11] magic (little endian) | [12..13] port (network order)
//         | [14] family (4 or 6) | [15] reserved | [16..31] address bytes | rest zero.
constexpr uint8_t kTag[4] = {'F', 'C', 'C', '1'};

uint64_t randomMagic() {
  std::random_device rd;
  uint64_t m = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return m ? m : 1;
}

std::string firstHostAddress() {
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_LOOPBACK) || !(it->ifa_flags & IFF_UP)) continue;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, host, sizeof host);
    found = host;
    break;
  }
  freeifaddrs(list);
  return found;
}

UniqueId encode(const SocketAddress& addr, uint64_t magic) {
  UniqueId id;
  std::memcpy(id.bytes.data(), kTag, 4);
  std::memcpy(id.bytes.data() + 4, &magic, 8);
  if (addr.storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    std::memcpy(id.bytes.data() + 12, &a->sin_port, 2);
    id.bytes[14] = 4;
    std::memcpy(id.bytes.data() + 16, &a->sin_addr, 4);
  } else {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    std::memcpy(id.bytes.data() + 12, &a->sin6_port, 2);
    id.bytes[14] = 6;
    std::memcpy(id.bytes.data() + 16, &a->sin6_addr, 16);
  }
  return id;
}

}  // namespace

SocketAddress uniqueIdAddress(const UniqueId& id) {
  SocketAddress out;
  if (id.bytes[14] == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out.storage);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_port, id.bytes.data() + 12, 2);
    std::memcpy(&a->sin_addr, id.bytes.data() + 16, 4);
    out.length = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out.storage);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_port, id.bytes.data() + 12, 2);
    std::memcpy(&a->sin6_addr, id.bytes.data() + 16, 16);
    out.length = sizeof(sockaddr_in6);
  }
  return out;
}

UniqueId UniqueId::create() {
  SocketAddress want = SocketAddress::parse(firstHostAddress() + ":0");
  Socket listener = Socket::listen(want);
  UniqueId id = encode(listener.localAddress(), randomMagic());
  RootSockets::instance().keep(id.magic(), std::move(listener));
  return id;
}

UniqueId UniqueId::fromAddress(const std::string& hostPort, uint64_t magic) {
  return encode(SocketAddress::parse(hostPort), magic ? magic : randomMagic());
}

UniqueId UniqueId::fromBytes(const std::string& raw) {
  if (raw.size() != kBytes)
    throw Error(ErrorCode::InvalidUsage, "forestcc: a unique id has " + std::to_string(kBytes) +
                                             " bytes, got " + std::to_string(raw.size()));
  UniqueId id;
  std::memcpy(id.bytes.data(), raw.data(), kBytes);
  if (std::memcmp(id.bytes.data(), kTag, 4) != 0 || (id.bytes[14] != 4 && id.bytes[14] != 6))
    throw Error(ErrorCode::InvalidUsage,
                "forestcc: these 128 bytes are not a forestcc unique id (made by forestcc.unique_id())");
  return id;
}

uint64_t UniqueId::magic() const {
  uint64_t m;
  std::memcpy(&m, bytes.data() + 4, 8);
  return m;
}

std::string UniqueId::address() const { return uniqueIdAddress(*this).toString(); }

std::string UniqueId::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(kBytes * 2);
  for (uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

UniqueId UniqueId::fromHex(const std::string& hex) {
  if (hex.size() != kBytes * 2)
    throw Error(ErrorCode::InvalidUsage, "forestcc: a unique id in hex has 256 digits");
  std::string raw(kBytes, '\0');
  for (size_t i = 0; i < kBytes; ++i) {
    auto nib = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      throw Error(ErrorCode::InvalidUsage, "forestcc: unique id hex has a non-hex digit");
    };
    raw[i] = static_cast<char>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  return fromBytes(raw);
}

RootSockets& RootSockets::instance() {
  static RootSockets r;
  return r;
}

void RootSockets::keep(uint64_t magic, Socket s) {
  std::lock_guard<std::mutex> g(mu_);
  sockets_[magic] = std::move(s);
}

void releaseUniqueId(const UniqueId& id) { RootSockets::instance().take(id.magic()); }

Socket RootSockets::take(uint64_t magic) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = sockets_.find(magic);
  if (it == sockets_.end()) return Socket();
  Socket s = std::move(it->second);
  sockets_.erase(it);
  return s;
}

}  // namespace forestcc
