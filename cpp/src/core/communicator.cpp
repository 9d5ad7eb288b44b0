#include "forestcc/communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "core/state.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

uint64_t hashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string packPeerInfo(const PeerInfo& p) {
  std::ostringstream o;
  o << p.pid << '\n' << p.controlName << '\n' << p.tcpAddress << '\n' << p.transports << '\n' << p.node;
  return o.str();
}

PeerInfo unpackPeerInfo(const std::string& s) {
  PeerInfo p;
  std::istringstream in(s);
  std::string pid;
  std::getline(in, pid);
  std::getline(in, p.controlName);
  std::getline(in, p.tcpAddress);
  std::getline(in, p.transports);
  std::getline(in, p.node);
  p.pid = std::stoi(pid);
  p.nodeHash = hashName(p.node);
  return p;
}

// Whether this node's ranks that may run on this rank's CPUs outnumber those CPUs. Affinity masks
// (taskset, cgroup cpusets, a launcher's binding) narrow what sysconf's count of online CPUs says:
// two ranks pinned to one CPU must yield at once, or every step costs a whole spin budget.
bool sharesCpus(const Communicator::State& s) {
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && static_cast<long>(s.localRanks.size()) > cpus;
  }
  cpu_set_t reach = mine;
  int ranks = 0;
  for (int r : s.localRanks) {
    cpu_set_t theirs = mine;  // a peer whose mask cannot be read is taken to share ours
    if (r != s.rank) sched_getaffinity(s.peers[r].pid, sizeof theirs, &theirs);
    cpu_set_t common;
    CPU_AND(&common, &theirs, &mine);
    if (CPU_COUNT(&common) == 0) continue;  // bound elsewhere: never takes our CPUs
    ++ranks;
    CPU_OR(&reach, &reach, &theirs);
  }
  return ranks > CPU_COUNT(&reach);
}

}  // namespace

// ---- State ----

Communicator::State::~State() {
  // Set only by the process that made the communicator: a forked child's copy going must not
  // tell the peers its parent left (the block is shared with the parent).
  if (control && !peers.empty() && peers[rank].pid == getpid())
    control->header.left.store(true, std::memory_order_release);
}

int Communicator::State::allocateSlot() {
  std::lock_guard<std::mutex> g(mu);
  if (nextSlot >= kSemaphoreSlots)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + "too many channels on this communicator (limit " +
                                             std::to_string(kSemaphoreSlots) + ")", rank);
  return nextSlot++;
}

WaitPolicy Communicator::State::waitPolicy(int peer, double timeoutSeconds) const {
  // A pid means something only on this node (another node's peer dies as its sockets close).
  const bool here = peer != rank && peer >= 0 && peer < size && nodeOf[peer] == nodeOf[rank];
  return WaitPolicy{timeoutSeconds, spinUs, yieldUs, rank, peer, here ? peers[peer].pid : 0, leftFlag(peer),
                    &control->header, &control->doorbell};
}

const std::atomic<bool>* Communicator::State::leftFlag(int peer) const {
  // A peer behind a proxied link (tcp) that said goodbye and closed it will never signal again.
  const bool linked = peer != rank && peer >= 0 && peer < static_cast<int>(connections.size()) &&
                      !connections[peer].empty();
  return linked ? connections[peer].front()->peerLeftFlag() : nullptr;
}

void Communicator::State::poison(const std::string& reason, ErrorCode code, uint64_t call) {
  storeAbort(control->header, rank, reason, code, call);
  // Connections are made at construction and never change after: no lock.
  for (int r = 0; r < size && r < static_cast<int>(connections.size()); ++r)
    if (r != rank && !connections[r].empty()) connections[r].front()->abort(reason, code, call);
}

// The poisoner sets abortBy first, then the message, code and call, then messageReady
// (storeAbort, control_block.hpp): a reader that saw abortBy waits (briefly) for the rest.
static bool abortRecord(const ControlHeader& h) {
  if (!h.abortBy.load(std::memory_order_acquire)) return false;
  for (int i = 0; i < 1000 && !h.messageReady.load(std::memory_order_acquire); ++i) usleep(100);
  return true;
}

void Communicator::State::awaitBufferHolders() const noexcept {
  // The poison this rank set is ordered before the holders are read (holdBuffers' other half).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  for (size_t i = 0; i < localRanks.size(); ++i) {
    const int holder = localRanks[i];
    if (holder == rank) continue;
    const BufferHold& hold = control->bufferHolds[i];
    auto holding = [&] {
      const uint64_t held = __atomic_load_n(&hold.held, __ATOMIC_RELAXED);
      return __atomic_load_n(&hold.released, __ATOMIC_ACQUIRE) < held;
    };
    // A holder that died never lets go, nor does one stopped (SIGSTOP) past the deadline.
    for (int polls = 0; holding(); ++polls) {
      if (polls % 64 == 63 && (!processAlive(peers[holder].pid) || std::chrono::steady_clock::now() >= deadline))
        break;
      usleep(polls < 64 ? 10 : 200);
    }
  }
}

uint64_t Communicator::State::poisonedCall() const {
  return abortRecord(control->header) ? control->header.abortCall.load(std::memory_order_relaxed) : 0;
}

ErrorCode Communicator::State::poisonedCode() const {
  if (!abortRecord(control->header)) return ErrorCode::Aborted;
  // Ranks whose calls disagreed all raise the mismatch, wherever it was seen first; a peer whose
  // connection broke (tcp) is a RemoteError, as a dead peer on this node is.
  const uint32_t code = control->header.abortCode.load(std::memory_order_relaxed);
  if (code == static_cast<uint32_t>(ErrorCode::Mismatch)) return ErrorCode::Mismatch;
  if (code == static_cast<uint32_t>(ErrorCode::Remote)) return ErrorCode::Remote;
  return ErrorCode::Aborted;
}

int Communicator::State::poisonedBy() const {
  return static_cast<int>(control->header.abortBy.load(std::memory_order_acquire)) - 1;
}

bool Communicator::State::poisoned() const { return control->header.abortBy.load(std::memory_order_acquire) != 0; }

void Communicator::State::raisePoisoned(const std::string& what, int peer) {
  throw Error(poisonedCode(), rankPrefix(rank) + what + " aborted: the communicator was poisoned; " + abortReason(),
              rank, peer);
}

std::string Communicator::State::abortReason() const {
  if (!abortRecord(control->header)) return "";
  return "rank " + std::to_string(control->header.abortBy.load(std::memory_order_acquire) - 1) +
         " reported: " + control->header.abortMessage;
}

void Communicator::State::raiseWaitFailure(WaitOutcome outcome, int peer, const std::string& what,
                                           double timeoutSeconds) {
  std::string prefix = rankPrefix(rank);
  switch (outcome) {
    case WaitOutcome::Aborted: raisePoisoned(what, peer);
    case WaitOutcome::PeerDead: {
      std::string msg = prefix + what + ": rank " + std::to_string(peer) + " (pid " +
                        std::to_string(peers[peer].pid) + ") died";
      poison(msg);
      throw Error(ErrorCode::Remote, msg, rank, peer);
    }
    case WaitOutcome::PeerLeft: {
      const std::string msg = prefix + what + ": rank " + std::to_string(peer) + " (pid " +
                              std::to_string(peers[peer].pid) + " on " + peers[peer].node +
                              ") left the job (it destroyed its communicator or its process ended) without "
                              "sending what this rank waits for: it ended before this call, or the ranks' calls "
                              "disagree";
      poison(msg);
      throw Error(ErrorCode::Remote, msg, rank, peer);
    }
    case WaitOutcome::Timeout: {
      std::ostringstream msg;
      msg << prefix << what << ": timed out after " << timeoutSeconds << " s waiting for rank " << peer;
      // Across nodes a silent peer is often its host or link: say which host.
      if (peer >= 0 && peer < size && nodeOf[peer] != nodeOf[rank]) msg << " on host '" << peers[peer].node << "'";
      msg << " to signal (FORESTCC_TIMEOUT sets the limit)";
      poison(msg.str());
      throw Error(ErrorCode::Timeout, msg.str(), rank, peer);
    }
    case WaitOutcome::Ready: break;
  }
  throw Error(ErrorCode::Internal, prefix + "raiseWaitFailure without a failure", rank, peer);
}

// ---- Communicator ----

Communicator::Communicator(std::unique_ptr<Bootstrap> bootstrap) : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.rank = bootstrap->rank();
  s.size = bootstrap->nranks();
  // init(timeout=...) bounds every later wait too, not only the rendezvous.
  s.timeout = bootstrap->timeoutSeconds();
  s.spinUs = config::spinMicroseconds();
  s.yieldUs = config::yieldMicroseconds();
  s.controlSegment = ShmSegment::create(sizeof(ControlBlock), "ctl");
  s.control = static_cast<ControlBlock*>(s.controlSegment->data());
  s.control->header.magic = kControlMagic;

  s.bootstrap = std::move(bootstrap);
  std::unique_ptr<tcp::TcpTransport> tcp = s.makeTcp();
  PeerInfo mine;
  mine.pid = getpid();
  mine.controlName = s.controlSegment->name();
  mine.tcpAddress = tcp->address();
  mine.transports = config::transports();
  mine.node = config::nodeId().empty() ? hostName() : config::nodeId();
  auto all = s.bootstrap->allGather(packPeerInfo(mine));
  s.peers.resize(s.size);
  s.nodeOf.resize(s.size);
  std::vector<std::string> nodes;
  for (int r = 0; r < s.size; ++r) {
    s.peers[r] = unpackPeerInfo(all[r]);
    s.peers[r].rank = r;
    int n = 0;
    while (n < static_cast<int>(nodes.size()) && nodes[n] != s.peers[r].node) ++n;
    if (n == static_cast<int>(nodes.size())) nodes.push_back(s.peers[r].node);
    s.nodeOf[r] = n;
  }
  s.nodeCount = static_cast<int>(nodes.size());
  for (int r = 0; r < s.size; ++r) {
    if (s.nodeOf[r] != s.nodeOf[s.rank]) continue;
    if (r == s.rank) s.localRank = static_cast<int>(s.localRanks.size());
    s.localRanks.push_back(r);
  }
  if (s.spinUs < 0) {
    // auto: spin while every rank that may share this rank's CPUs can have one; when they
    // outnumber them, a spinning rank would hold the CPU the rank it waits for needs, so yield
    // almost at once.
    s.spinUs = sharesCpus(s) ? 1 : 50;
  }
  // Connect every peer now (mapping same-node peers' control blocks, opening sockets to other
  // nodes'), so abort() reaches all of them.
  s.makeConnections(std::move(tcp));
  // No rank returns before every rank has mapped its peers' blocks: a rank that destroyed its
  // communicator at once (a program refusing the job's size, say) would otherwise unlink its
  // block under a slower peer, which then failed with a misleading "no such segment".
  s.bootstrap->barrier();
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return state_->rank; }
int Communicator::size() const { return state_->size; }
int Communicator::localRank() const { return state_->localRank; }
int Communicator::localSize() const { return static_cast<int>(state_->localRanks.size()); }
int Communicator::nodeCount() const { return state_->nodeCount; }
const std::vector<int>& Communicator::localRanks() const { return state_->localRanks; }
double Communicator::timeoutSeconds() const { return state_->timeout; }
double Communicator::spinMicroseconds() const { return state_->spinUs; }
double Communicator::yieldMicroseconds() const { return state_->yieldUs; }
Bootstrap& Communicator::bootstrap() { return *state_->bootstrap; }

int Communicator::nodeOf(int r) const {
  if (r < 0 || r >= state_->size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(state_->rank) + "rank " + std::to_string(r) + " is out of range");
  return state_->nodeOf[r];
}

bool Communicator::peerLeft(int r) const {
  nodeOf(r);  // throws for a rank out of range
  const std::atomic<bool>* left = state_->leftFlag(r);
  return left && left->load(std::memory_order_acquire);
}

const std::string& Communicator::nodeName(int r) const {
  nodeOf(r);
  return state_->peers[r].node;
}

RegisteredMemory Communicator::registerMemory(void* data, size_t size, MemoryKind kind) {
  State& s = *state_;
  if (kind != MemoryKind::Host)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "forestcc does not support registering GPU memory "
                                                             "in this build yet (CUDA IPC transport)", s.rank);
  if (!data && size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "register: null pointer with " + std::to_string(size) + " bytes", s.rank);
  std::shared_ptr<void> keepAlive;  // a shared segment the memory lies in, say
  MemoryHandle h = s.describe(data, size, &keepAlive);
  return RegisteredMemory(data, size, h, std::move(keepAlive));
}

void Communicator::abort(const std::string& reason) { state_->poison(rankPrefix(state_->rank) + reason); }

void Communicator::checkHealthy() const {
  if (state_->poisoned())
    throw Error(ErrorCode::Aborted, rankPrefix(state_->rank) + "the communicator was poisoned; " + state_->abortReason(),
                state_->rank);
}

}  // namespace forestcc
