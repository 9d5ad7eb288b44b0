// Communicator::connect(): the handshake that makes the channels of registered memory (each rank
// sends its handle and the semaphore slot it will wait on), and the MemoryChannel over the
// connection that reaches the peer's memory. In the channels layer, above the communicator.
#include <cstring>

#include "channels/memory_channel.hpp"
#include "core/state.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

// Connection handshakes use their own tag space inside the bootstrap's reserved range.
constexpr uint64_t kConnectTag = Bootstrap::kInternalTag | (1ull << 56);
constexpr uint64_t kAttachedTag = Bootstrap::kInternalTag | (2ull << 56);
constexpr uint64_t kMaxUserTag = (1ull << 56) - 1;

}  // namespace

std::shared_ptr<Channel> Communicator::connect(int peer, const RegisteredMemory& local, uint64_t tag) {
  return connect(std::vector<int>{peer}, local, tag).front();
}

std::vector<std::shared_ptr<Channel>> Communicator::connect(const std::vector<int>& peers,
                                                            const RegisteredMemory& local, uint64_t tag) {
  State& s = *state_;
  checkHealthy();
  if (tag > kMaxUserTag)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "connect: tag must be below 2^56", s.rank);
  if (local.handle().ownerRank != s.rank)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(s.rank) + "connect: the memory was not registered on this communicator", s.rank);
  for (int peer : peers) {
    if (peer < 0 || peer >= s.size)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(s.rank) + "connect: peer " + std::to_string(peer) + " is out of range (0.." +
                      std::to_string(s.size - 1) + ")",
                  s.rank, peer);
  }
  // Every handshake is sent before any is awaited, so ranks may list their peers in any order.
  std::vector<int> slots;
  for (int peer : peers) {
    int slot = s.allocateSlot();
    slots.push_back(slot);
    std::string msg = local.serialize();
    msg.append(reinterpret_cast<const char*>(&slot), sizeof slot);
    s.bootstrap->send(peer, kConnectTag | tag, msg);
  }
  std::vector<std::shared_ptr<Channel>> channels;
  for (size_t i = 0; i < peers.size(); ++i) {
    int peer = peers[i];
    std::string reply = s.bootstrap->recv(peer, kConnectTag | tag);
    int remoteSlot = 0;
    std::memcpy(&remoteSlot, reply.data() + reply.size() - sizeof remoteSlot, sizeof remoteSlot);
    MemoryHandle rh = RegisteredMemory::deserialize(reply.substr(0, reply.size() - sizeof remoteSlot));
    channels.push_back(makeMemoryChannel(peer, local, rh, slots[i], remoteSlot, tag));
  }
  // Neither end returns before both have opened each other's memory: a peer that is done right
  // after connect and exits (its shared-memory names go with it) could otherwise pull its memory
  // away while this rank is still opening it ("shm_open ... No such file", seen in CI).
  for (int peer : peers) s.bootstrap->send(peer, kAttachedTag | tag, std::string());
  for (int peer : peers) s.bootstrap->recv(peer, kAttachedTag | tag);
  return channels;
}

std::shared_ptr<Channel> Communicator::makeMemoryChannel(int peer, const RegisteredMemory& local,
                                                         const MemoryHandle& rh, int slot, int remoteSlot,
                                                         uint64_t tag) {
  State& s = *state_;
  Connection& connection = s.connection(peer, rh);
  RemoteRegion remote = connection.attach(rh);
  uint64_t* inbound = s.inboundWord(SemaphoreSet::Channel, peer, slot);
  std::string name =
      "rank " + std::to_string(s.rank) + " -> rank " + std::to_string(peer) + ", tag " + std::to_string(tag);
  return std::make_shared<MemoryChannel>(state_, peer, local, connection, remote, inbound, remoteSlot, std::move(name));
}

}  // namespace forestcc
