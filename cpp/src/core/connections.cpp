// The communicator's transports and connections: made once when it is constructed, one list per
// peer in the order transports are tried, and chosen per memory handle (a call's buffers may be
// shared allocations or ordinary arrays, so the same peer can need shm for one and cma for
// another). The list of transports below is the one place that names them.
#include <algorithm>
#include <utility>

#include "core/state.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "transport/cma/cma_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace forestcc {

int Communicator::State::localIndex(int r) const {
  auto it = std::find(localRanks.begin(), localRanks.end(), r);
  return it == localRanks.end() ? -1 : static_cast<int>(it - localRanks.begin());
}

std::unique_ptr<tcp::TcpTransport> Communicator::State::makeTcp() {
  tcp::TcpOptions o;
  o.rank = rank;
  o.size = size;
  o.control = control;
  o.timeout = timeout;
  o.streams = config::tcpStreams();
  o.ifname = config::socketInterfaces();
  o.rootAddress = bootstrap->id().address();
  return std::make_unique<tcp::TcpTransport>(o);
}

namespace {

std::vector<std::string> transportList(const std::string& spec, int rank) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    std::string name = spec.substr(start, comma - start);
    if (name != "shm" && name != "cma" && name != "tcp")
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + "FORESTCC_TRANSPORT='" + spec + "': '" + name +
                      "' is not a transport (auto, or a list of shm, cma, tcp)",
                  rank);
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

}  // namespace

void Communicator::State::makeConnections(std::unique_ptr<Transport> tcp) {
  // Every rank must reach its peers the way they reach it (a tcp connection has two ends).
  for (int r = 0; r < size; ++r)
    if (peers[r].transports != peers[rank].transports)
      throw Error(ErrorCode::InvalidUsage,
                  rankPrefix(rank) + "FORESTCC_TRANSPORT is '" + peers[rank].transports + "' here but '" +
                      peers[r].transports + "' on rank " + std::to_string(r) + ": every rank must set the same",
                  rank, r);
  // In the order they are tried: mapped memory before copies, copies before sockets.
  // cuda_ipc (GPU memory) joins here.
  auto node = std::make_shared<NodeBlocks>(peers[rank], localRanks, controlSegment);
  transports.push_back(std::make_unique<ShmTransport>(node));
  transports.push_back(std::make_unique<CmaTransport>(node));
  transports.push_back(std::move(tcp));
  // Which transports may connect two different ranks: auto keeps a node's ranks on shared memory
  // and cross-process copies and puts tcp between nodes; a list names them for every pair. A
  // rank reaches its own memory through shm's loopback either way.
  const bool automatic = peers[rank].transports == "auto";
  const std::vector<std::string> chosen = automatic ? std::vector<std::string>{} : transportList(peers[rank].transports, rank);
  auto allowed = [&](const Transport& t, int r) {
    if (r == rank) return t.kind() == TransportKind::Shm;
    if (automatic) return (t.kind() == TransportKind::Tcp) != (nodeOf[r] == nodeOf[rank]);
    return std::find(chosen.begin(), chosen.end(), std::string(t.name())) != chosen.end();
  };
  connections.resize(size);
  for (int r = 0; r < size; ++r)
    for (auto& t : transports)
      if (allowed(*t, r) && t->reaches(peers[r])) connections[r].push_back(t->connect(peers[r]));
  for (auto& t : transports) t->connected();
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
  return link(peer).inboundWord(set, index);
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
