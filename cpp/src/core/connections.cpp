// The communicator's connections: made once when it is constructed, one list per peer in the
// order transports are tried, and chosen per memory handle (a call's buffers may be shared
// allocations or ordinary arrays, so the same peer can need shm for one and cma for another).
#include <algorithm>

#include "core/state.hpp"
#include "forestcc/error.hpp"
#include "transport/cma/cma_connection.hpp"
#include "transport/shm/shm_connection.hpp"

namespace forestcc {

int Communicator::State::localIndex(int r) const {
  auto it = std::find(localRanks.begin(), localRanks.end(), r);
  return it == localRanks.end() ? -1 : static_cast<int>(it - localRanks.begin());
}

void Communicator::State::makeConnections() {
  connections.resize(size);
  for (int r : localRanks) {
    NodePeer np;
    np.rank = rank;
    np.peer = r;
    np.peerPid = peers[r].pid;
    np.localIndex = localRank;
    if (r == rank) {
      np.control = controlSegment;
    } else {
      np.control = ShmSegment::open(peers[r].controlName, sizeof(ControlBlock), rank, r);
      peerControls[r] = np.control;  // poison() reaches it
    }
    connections[r].push_back(std::make_unique<ShmConnection>(np));
    if (r != rank) connections[r].push_back(std::make_unique<CmaConnection>(np, peers[rank].nodeHash));
  }
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

MemoryHandle Communicator::State::describe(const void* data, uint64_t bytes) {
  MemoryHandle h;
  h.kind = MemoryKind::Host;
  h.ownerRank = rank;
  h.ownerPid = peers[rank].pid;
  h.nodeHash = peers[rank].nodeHash;
  h.address = reinterpret_cast<uint64_t>(data);
  h.size = bytes;
  size_t offset = 0;
  std::shared_ptr<ShmSegment> seg = data ? findSharedAllocation(data, bytes, &offset) : nullptr;
  if (seg) {
    h.shmOffset = offset;
    h.shmSize = seg->size();
    h.shmId = shmSegmentId(seg->name());
    std::snprintf(h.shmName, sizeof h.shmName, "%s", seg->name().c_str());
  }
  return h;
}

MemoryHandle Communicator::State::describe(const ShmSegment& segment) {
  MemoryHandle h = describe(nullptr, 0);
  h.address = reinterpret_cast<uint64_t>(segment.data());
  h.size = segment.size();
  h.shmSize = segment.size();
  h.shmId = shmSegmentId(segment.name());
  std::snprintf(h.shmName, sizeof h.shmName, "%s", segment.name().c_str());
  return h;
}

}  // namespace forestcc
