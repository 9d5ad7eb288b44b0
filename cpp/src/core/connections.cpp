// The communicator's transports and connections: made once when it is constructed, one list per
// peer in the order transports are tried, and chosen per memory handle (a call's buffers may be
// shared allocations or ordinary arrays, so the same peer can need shm for one and cma for
// another). The list of transports below is the one place that names them.
#include <algorithm>
#include <utility>

#include "core/state.hpp"
#include "forestcc/error.hpp"
#include "transport/cma/cma_transport.hpp"
#include "transport/shm/shm_transport.hpp"

namespace forestcc {

int Communicator::State::localIndex(int r) const {
  auto it = std::find(localRanks.begin(), localRanks.end(), r);
  return it == localRanks.end() ? -1 : static_cast<int>(it - localRanks.begin());
}

void Communicator::State::makeConnections() {
  // In the order they are tried: mapped memory before copies. tcp (other nodes) and cuda_ipc
  // (GPU memory) join here.
  auto node = std::make_shared<NodeBlocks>(peers[rank], localRank, controlSegment);
  transports.push_back(std::make_unique<ShmTransport>(node));
  transports.push_back(std::make_unique<CmaTransport>(node));

  connections.resize(size);
  for (int r = 0; r < size; ++r)
    for (auto& t : transports)
      if (t->reaches(peers[r])) connections[r].push_back(t->connect(peers[r]));
}

Connection& Communicator::State::link(int peer) {
  if (peer < 0 || peer >= size || connections[peer].empty())
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(rank) + "no connection to rank " + std::to_string(peer) +
                    (peer >= 0 && peer < size ? " (on node '" + peers[peer].node + "', this rank on '" +
                                                    peers[rank].node +
                                                    "'): forestcc does not support transports between nodes in "
                                                    "this version (TCP)"
                                              : ": out of range"),
                rank, peer);
  return *connections[peer].front();
}

Connection& Communicator::State::connection(int peer, const MemoryHandle& h) {
  link(peer);  // a peer without connections raises there
  for (auto& c : connections[peer])
    if (c->reaches(h)) return *c;
  throw Error(ErrorCode::InvalidUsage,
              rankPrefix(rank) + "no transport reaches memory of rank " + std::to_string(peer) + " (" +
                  std::to_string(h.size) + " bytes of " + (h.kind == MemoryKind::Host ? "host" : "GPU") +
                  " memory of rank " + std::to_string(h.ownerRank) + ")",
              rank, peer);
}

uint64_t* Communicator::State::inboundWord(SemaphoreSet set, int peer, int index) {
  return semaphoreWord(*control, set, localIndex(peer), index);
}

void Communicator::State::published() {
  for (auto& list : connections)
    if (!list.empty()) list.front()->callPublished(control->mailbox);
}

MemoryHandle Communicator::State::describe(const void* data, uint64_t bytes, std::shared_ptr<void>* keepAlive) {
  MemoryHandle h;
  h.kind = MemoryKind::Host;
  h.ownerRank = rank;
  h.nodeHash = peers[rank].nodeHash;
  h.address = reinterpret_cast<uint64_t>(data);
  h.size = bytes;
  for (auto& t : transports) {
    std::shared_ptr<void> keep = t->registerMemory(data, bytes, h);
    if (!keep || !keepAlive) continue;
    // Two transports that each pin something (none yet) keep both.
    using Both = std::pair<std::shared_ptr<void>, std::shared_ptr<void>>;
    *keepAlive = *keepAlive ? std::make_shared<Both>(*keepAlive, keep) : keep;
  }
  return h;
}

}  // namespace forestcc
