// Point-to-point batches: one batch of sends and receives run with its peers (point_to_point.hpp
// has the protocol). The engine's send, recv and sendRecv, which order batches against each other,
// are in engine_send_recv.cpp.
#include "collectives/point_to_point.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "collectives/engine.hpp"
#include "core/state.hpp"
#include "core/wait.hpp"
#include "forestcc/error.hpp"
#include "transport/cuda_ipc/ipc_event.hpp"
#include "transport/cuda_ipc/ipc_memory.hpp"

namespace forestcc::collectives {

namespace {

constexpr uint64_t kManifestMagic = 0x666363702d6d616eULL;  // marks a post as a batch's manifest
// Marks the manifest of a refused batch (PointToPoint::refuse): its messages hold no data, and
// each fails the receive that matches it.
constexpr uint64_t kRefusedManifestMagic = 0x666363702d726566ULL;

struct ManifestHeader {
  uint64_t magic;
  uint64_t count;  // MemoryHandles that follow
  // GPU memory (point_to_point.hpp): the sender's batch event, when the direction moves GPU bytes
  // (ownerPid 0 otherwise), and the receiver's event of the direction, which the receiver writes
  // here before it signals RecvDone.
  cuda_ipc::EventHandle batchEvent;
  cuda_ipc::EventHandle receiveEvent;
};
static_assert(sizeof(ManifestHeader) % alignof(MemoryHandle) == 0, "handles follow the header aligned");

size_t manifestBytes(size_t messages) { return sizeof(ManifestHeader) + messages * sizeof(MemoryHandle); }

// Small host messages to a peer that maps this rank's shared memory (same node, shm transport)
// travel in the sender's manifest space: the sender copies each there and its handle names the
// copy, which the receiver reads with a plain copy. Read from the sender's own buffer, each would
// cost the receiver a cma system call (its ptrace checks included), dearer than copying the
// message twice up to about 128 KiB (sendrecv_perf, 2 ranks: 4 KiB 4.7 -> 2.7 us, 64 KiB 8.3 ->
// 6.0, 128 KiB 12.2 -> 9.5; at 256 KiB and above no better). A message already in forestcc's shared memory is read
// where it is, except up to kAlwaysInlineBytes, whose copy costs less than finding out. The
// receiver cannot tell the difference. At most kInlineBatchBytes of a batch go this way (the
// space is kept for the next batches).
constexpr size_t kInlineMessageBytes = 128 << 10;
constexpr size_t kAlwaysInlineBytes = 4 << 10;
constexpr size_t kInlineBatchBytes = 1 << 20;
constexpr size_t kInlineAlign = 64;
size_t inlineBytes(size_t bytes) { return (bytes + kInlineAlign - 1) / kInlineAlign * kInlineAlign; }

// The receiver's answer to a manifest (Connection::answerSendPost). A mismatch says what the
// sender needs to name it: the first message whose size differs and the size the receiver
// expected there, or the first of the other memory kind.
constexpr int64_t kReceived = 0;
constexpr int64_t kCopyFailed = -1;
constexpr int64_t kRecvRefused = -2;  // the receiver refused its receive of one of the messages
constexpr int64_t kUncodedMismatch = int64_t(1) << 61;  // a size mismatch too large to encode
constexpr int64_t kKindMismatch = int64_t(1) << 60;      // | the index of a message of the other memory kind
constexpr int kIndexShift = 40;                          // a size mismatch: index << 40 | (expected + 1)
constexpr uint64_t kLowMask = (uint64_t(1) << kIndexShift) - 1;

int64_t kindMismatch(size_t index) {
  return kKindMismatch | static_cast<int64_t>(std::min<uint64_t>(index, kLowMask));
}
int64_t sizeMismatch(size_t index, uint64_t expected) {
  if (index >= (size_t(1) << 20) || expected >= kLowMask) return kUncodedMismatch;
  return static_cast<int64_t>(index) << kIndexShift | static_cast<int64_t>(expected + 1);
}

// "40 bytes" for one message, "3 messages (8, 0, 16 bytes)" for several (the first 8 sizes).
template <class Sizes>
std::string describeMessages(size_t count, Sizes&& sizeOf) {
  if (count == 1) return std::to_string(sizeOf(0)) + " bytes";
  std::string text = std::to_string(count) + " messages (";
  for (size_t i = 0; i < count && i < 8; ++i) text += (i ? ", " : "") + std::to_string(sizeOf(i));
  return text + (count > 8 ? ", ... bytes)" : " bytes)");
}

const char* const kMatchRule =
    " (the messages one rank sends another are received there in the same order, whatever the batches "
    "on either side, of the same sizes, GPU memory to GPU memory and host memory to host memory)";

bool onDevice(int device) { return device >= 0; }
const char* kindName(bool device) { return device ? "GPU memory" : "host memory"; }

// Whether a message moves GPU bytes (a message of no bytes moves nothing, whatever its kind).
template <class Message>
bool movesDeviceBytes(const Message& m) {
  return onDevice(m.device) && m.bytes;
}

// The messages of a batch with one peer, in call order.
struct Outgoing {
  int peer;
  std::vector<const SendMessage*> messages;
  uint64_t want = 0;  // the RecvDone count that answers this batch
  bool done = false;
  bool device = false;                // moves GPU bytes
  ManifestHeader* header = nullptr;   // the posted manifest (the receiver answers in it)
  std::string describe() const {
    return describeMessages(messages.size(), [&](size_t i) { return messages[i]->bytes; });
  }
};
struct Incoming {
  int peer;
  std::vector<const RecvMessage*> messages;
  uint64_t want = 0;    // the SendReady count that posts the peer's next manifest (0: one is being read)
  size_t received = 0;  // messages of this batch received so far
  bool done = false;
  std::string describe() const {
    return describeMessages(messages.size(), [&](size_t i) { return messages[i]->bytes; });
  }
};

// The messages of a batch grouped by peer, peers in order of first appearance (one entry per
// peer however many messages: an all-to-all on many ranks stays linear).
template <class Message, class Direction>
std::vector<Direction> byPeer(const std::vector<Message>& messages, int self, int nranks,
                              std::vector<const Message*>* toSelf) {
  std::vector<Direction> directions;
  std::vector<int> slot(nranks, -1);  // index in directions, by peer
  for (const Message& m : messages) {
    const int peer = static_cast<int>(m.peer);
    if (peer == self) {
      toSelf->push_back(&m);
      continue;
    }
    if (slot[peer] < 0) {
      slot[peer] = static_cast<int>(directions.size());
      directions.push_back(Direction{peer, {}});
    }
    directions[slot[peer]].messages.push_back(&m);
    if constexpr (std::is_same_v<Direction, Outgoing>) directions[slot[peer]].device |= movesDeviceBytes(m);
  }
  return directions;
}

// The CUDA device of the batch's GPU messages (-1: none). Refused before any peer is told of the
// batch: GPU memory in a build without CUDA, on two devices (a stream is of one device), or to or
// from a rank of another node (CUDA IPC reaches this node only).
int batchDevice(const Communicator::State& s, const std::vector<SendMessage>& sends,
                const std::vector<RecvMessage>& recvs) {
  int device = -1;
  auto take = [&](const auto& m, const char* verb, const char* way) {
    if (!onDevice(m.device)) return;
    const std::string what = rankPrefix(s.rank) + verb + " of " + std::to_string(m.bytes) + " bytes of GPU memory " +
                             way + " rank " + std::to_string(m.peer);
    if (!cuda_ipc::available())
      throw Error(ErrorCode::InvalidUsage, what + ": this forestcc was built without CUDA (no nvcc when it was built): "
                                               "it cannot send or receive GPU memory",
                  s.rank, static_cast<int>(m.peer));
    if (device >= 0 && m.device != device)
      throw Error(ErrorCode::InvalidUsage, what + ": it is on CUDA device " + std::to_string(m.device) +
                                               " but the batch's other GPU messages are on device " +
                                               std::to_string(device) + " (one stream, one device)",
                  s.rank, static_cast<int>(m.peer));
    device = m.device;
    if (s.nodeOf[m.peer] != s.nodeOf[s.rank])
      throw Error(ErrorCode::InvalidUsage, what + ": that rank is on another node, and send/recv of GPU memory "
                                               "reaches ranks of this node only (CUDA IPC)",
                  s.rank, static_cast<int>(m.peer));
  };
  for (const SendMessage& m : sends) take(m, "send", "to");
  for (const RecvMessage& m : recvs) take(m, "recv", "from");
  return device;
}


// Messages to this rank itself: the k-th send goes to the k-th receive (checked before any peer is
// told of the batch, copied once the batch's device is current).
void checkToSelf(int rank, const std::vector<const SendMessage*>& sends, const std::vector<const RecvMessage*>& recvs) {
  auto sizes = [](const auto& list) {
    return describeMessages(list.size(), [&](size_t i) { return list[i]->bytes; });
  };
  if (sends.size() != recvs.size())
    throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + "the batch sends " + (sends.empty() ? "nothing" : sizes(sends)) +
                                             " to this rank itself and receives " +
                                             (recvs.empty() ? "nothing" : sizes(recvs)) + " from it; they must pair up",
                rank, rank);
  for (size_t k = 0; k < sends.size(); ++k)
    if (sends[k]->bytes != recvs[k]->bytes)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + "send " + std::to_string(k) + " to this rank itself has " +
                                               std::to_string(sends[k]->bytes) + " bytes but its recv expects " +
                                               std::to_string(recvs[k]->bytes),
                  rank, rank);
  for (size_t k = 0; k < sends.size(); ++k)
    if (sends[k]->bytes && onDevice(sends[k]->device) != onDevice(recvs[k]->device))
      throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + "send " + std::to_string(k) + " to this rank itself is " +
                                               kindName(onDevice(sends[k]->device)) + " but its recv is " +
                                               kindName(onDevice(recvs[k]->device)) + kMatchRule,
                  rank, rank);
}
void copyToSelf(int rank, const std::vector<const SendMessage*>& sends, const std::vector<const RecvMessage*>& recvs,
                void* stream) {
  for (size_t k = 0; k < sends.size(); ++k) {
    if (!sends[k]->bytes) continue;
    if (movesDeviceBytes(*sends[k]))
      cuda_ipc::copyOnStream(recvs[k]->data, sends[k]->data, sends[k]->bytes, stream,
                             rankPrefix(rank) + "send " + std::to_string(k) + " to this rank itself");
    else
      std::memmove(recvs[k]->data, sends[k]->data, sends[k]->bytes);
  }
}

// The sender's error for the receiver's answer `status` (not kReceived).
Error sendFailure(int rank, const Outgoing& out, int64_t status) {
  const std::string what = rankPrefix(rank) + "send of " + out.describe() + " to rank " + std::to_string(out.peer);
  if (status == kRecvRefused)
    return Error(ErrorCode::Mismatch, what + ": rank " + std::to_string(out.peer) + " refused its recv of " +
                                          (out.messages.size() == 1 ? "it (its call raised an error there before anything "
                                                                      "moved), so it was"
                                                                    : "one of them (its call raised an error there before "
                                                                      "anything moved), which was") +
                                          " not received",
                 rank, out.peer);
  if (status < 0) return Error(ErrorCode::Remote, what + ": the receiver failed to copy the data", rank, out.peer);
  if (status & kKindMismatch) {
    const size_t index = static_cast<size_t>(status & static_cast<int64_t>(kLowMask));
    const bool mine = index < out.messages.size() && onDevice(out.messages[index]->device);
    return Error(ErrorCode::InvalidUsage, what + ": " +
                                              (out.messages.size() == 1 ? std::string("it is ")
                                                                        : "message " + std::to_string(index) + " is ") +
                                              kindName(mine) + " but the matching recv is " + kindName(!mine) +
                                              kMatchRule,
                 rank, out.peer);
  }
  if (status == kUncodedMismatch)
    return Error(ErrorCode::InvalidUsage, what + ": the sizes differ from its matching recvs" + kMatchRule, rank, out.peer);
  const size_t index = static_cast<size_t>(status >> kIndexShift);
  const std::string expected = std::to_string((static_cast<uint64_t>(status) & kLowMask) - 1);
  if (out.messages.size() == 1)
    return Error(ErrorCode::InvalidUsage, what + ": the matching recv expected " + expected + " bytes", rank, out.peer);
  return Error(ErrorCode::InvalidUsage, what + ": message " + std::to_string(index) + " has " +
                                            std::to_string(out.messages.at(index)->bytes) +
                                            " bytes but the matching recv expected " + expected + kMatchRule,
               rank, out.peer);
}

}  // namespace

struct PointToPoint::Reading {
  MemoryHandle post;                // the sender's post: answered, and the receive event written, there
  ManifestHeader header;
  std::vector<MemoryHandle> sent;   // the sender's messages
  size_t next = 0;                  // the first message not yet received
  // GPU: the completion of the batch that received messages [0, next), when one did on the GPU:
  // a later batch's stream waits for it, so the receive event it records covers every copy.
  std::shared_ptr<DeviceCompletion> earlier;
  bool touched = false;             // received GPU messages in the batch now running
  bool copiedOnDevice = false;      // some batch copied GPU messages of it (a receive event is then due)
  bool refusedSend = false;         // the sender refused this batch: its messages fail their receives
  int64_t answer = kReceived;       // kRecvRefused once a refused receive took one of its messages
};

PointToPoint::PointToPoint(std::shared_ptr<Communicator::State> state)
    : state_(std::move(state)),
      sendsDone_(state_->size, 0),
      sendsReady_(state_->size, 0),
      mapsShm_(state_->size, -1),
      reading_(state_->size) {}

PointToPoint::~PointToPoint() = default;

bool PointToPoint::mapsShm(int peer) {
  if (mapsShm_[peer] < 0) {
    Communicator::State& s = *state_;
    s.link(peer);
    mapsShm_[peer] = 0;
    for (const auto& c : s.connections[peer]) mapsShm_[peer] |= c->transport() == TransportKind::Shm;
  }
  return mapsShm_[peer] == 1;
}

char* PointToPoint::manifestSpace(size_t bytes) {
  if (!manifests_ || manifests_->size() < bytes)
    manifests_ = std::make_unique<SharedAllocation>(std::max<size_t>(bytes * 2, 64 << 10));
  return static_cast<char*>(manifests_->data());
}

namespace {
void refuseCapture(const Communicator::State& s, void* stream, const std::string& what) {
  // The rendezvous and the events are of this call: a graph replay could not repeat them.
  if (cuda_ipc::capturing(stream, what))
    throw Error(ErrorCode::InvalidUsage, what + ": its stream is being captured into a CUDA graph, and "
                                                "send/recv of GPU memory cannot be captured",
                s.rank);
}
}  // namespace

std::shared_ptr<cuda_ipc::SharedEvent> PointToPoint::recordAtCall(const std::vector<SendMessage>& sends,
                                                                  const std::vector<RecvMessage>& recvs, void* stream) {
  Communicator::State& s = *state_;
  const int device = batchDevice(s, sends, recvs);
  if (device < 0) return nullptr;
  const std::string what = rankPrefix(s.rank) + "a send/recv batch on GPU memory";
  cuda_ipc::CurrentDevice current(device, what);
  refuseCapture(s, stream, what);
  bool sendsDevice = false;
  for (const SendMessage& m : sends) sendsDevice |= movesDeviceBytes(m) && m.peer != s.rank;
  if (!sendsDevice) return nullptr;
  auto event = std::make_shared<cuda_ipc::SharedEvent>(device, what);
  event->record(stream, what + " (its send event)");
  return event;
}

std::shared_ptr<DeviceCompletion> PointToPoint::run(const std::vector<SendMessage>& sends,
                                                          const std::vector<RecvMessage>& recvs, void* stream,
                                                          const cuda_ipc::SharedEvent* sendEvent) {
  return exchange(sends, recvs, stream, sendEvent, false);
}

void PointToPoint::refuse(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs) noexcept {
  try {
    const Communicator::State& s = *state_;
    auto toPeer = [&](int64_t peer) { return peer >= 0 && peer < s.size && peer != s.rank; };
    std::vector<SendMessage> refusedSends;
    std::vector<RecvMessage> refusedRecvs;
    for (const SendMessage& m : sends)
      if (toPeer(m.peer)) refusedSends.push_back(SendMessage{m.peer, nullptr, 0, -1});
    for (const RecvMessage& m : recvs)
      if (toPeer(m.peer)) refusedRecvs.push_back(RecvMessage{m.peer, nullptr, 0, -1});
    if (!refusedSends.empty() || !refusedRecvs.empty()) exchange(refusedSends, refusedRecvs, nullptr, nullptr, true);
  } catch (...) {
    // A wait that failed poisoned the communicator where it had to; the caller raises its own error.
  }
}

std::shared_ptr<DeviceCompletion> PointToPoint::exchange(const std::vector<SendMessage>& sends,
                                                         const std::vector<RecvMessage>& recvs, void* stream,
                                                         const cuda_ipc::SharedEvent* sendEvent, bool refused) {
  Communicator::State& s = *state_;
  std::vector<const SendMessage*> sendsToSelf;
  std::vector<const RecvMessage*> recvsFromSelf;
  std::vector<Outgoing> outgoing = byPeer<SendMessage, Outgoing>(sends, s.rank, s.size, &sendsToSelf);
  std::vector<Incoming> incoming = byPeer<RecvMessage, Incoming>(recvs, s.rank, s.size, &recvsFromSelf);
  // Refused before any peer is told of the batch: then run as refused, so that each message still
  // takes its place on the peers (refuse).
  int device = -1;
  const std::string gpuWhat = rankPrefix(s.rank) + "a send/recv batch on GPU memory";
  std::unique_ptr<cuda_ipc::CurrentDevice> current;
  if (!refused) {
    try {
      device = batchDevice(s, sends, recvs);
      checkToSelf(s.rank, sendsToSelf, recvsFromSelf);
      if (device >= 0) {
        current = std::make_unique<cuda_ipc::CurrentDevice>(device, gpuWhat);
        refuseCapture(s, stream, gpuWhat);
      }
      copyToSelf(s.rank, sendsToSelf, recvsFromSelf, stream);
    } catch (...) {
      refuse(sends, recvs);
      throw;
    }
  }
  // Events of this device (remade when the caller's device changed since the last batch).
  auto eventOf = [&](std::unique_ptr<cuda_ipc::SharedEvent>& e, int on) -> cuda_ipc::SharedEvent& {
    if (!e || e->device() != on) e = std::make_unique<cuda_ipc::SharedEvent>(on, gpuWhat);
    return *e;
  };

  // Once a manifest may have reached a peer or a receive was counted, a failure that leaves a
  // direction unfinished leaves the pair out of step (the peer may still read the manifest or
  // the data, which the next batch reuses and the caller may free, and the counters no longer
  // match): then no later call may trust the communicator. (A mismatch or a failed copy is not
  // such a failure: every direction finished and both sides know.)
  bool underway = false;
  std::exception_ptr firstFailure;
  bool poisonedHere = false;  // by this batch's own mismatch in a split manifest
  try {
    // Post every manifest first: no peer then waits on this rank for anything but its copies.
    size_t total = 0, inlined = 0;
    bool sendsDevice = false;
    for (Outgoing& out : outgoing) {
      total += manifestBytes(out.messages.size());
      sendsDevice |= out.device;
      if (!mapsShm(out.peer)) continue;
      for (const SendMessage* m : out.messages)
        if (!onDevice(m->device) && m->bytes && m->bytes <= kInlineMessageBytes &&
            inlined + inlineBytes(m->bytes) <= kInlineBatchBytes)
          inlined += inlineBytes(m->bytes);
    }
    total = inlineBytes(total);  // the inline copies follow the manifests, aligned
    char* space = outgoing.empty() ? nullptr : manifestSpace(total + inlined);
    char* inlineSpace = space ? space + total : nullptr;
    char* const inlineEnd = inlineSpace ? inlineSpace + inlined : nullptr;
    // Recorded before this batch gives its stream any wait: the receivers' copies wait for it.
    cuda_ipc::EventHandle batchEvent;
    if (sendsDevice && sendEvent) batchEvent = sendEvent->handle();
    else if (sendsDevice) batchEvent = eventOf(batchEvent_, device).record(stream, gpuWhat + " (its send event)");
    std::vector<std::shared_ptr<void>> keepAlive;  // segments the posted handles lie in
    for (Outgoing& out : outgoing) {
      auto* header = reinterpret_cast<ManifestHeader*>(space);
      auto* handles = reinterpret_cast<MemoryHandle*>(space + sizeof(ManifestHeader));
      header->magic = refused ? kRefusedManifestMagic : kManifestMagic;
      header->count = out.messages.size();
      header->batchEvent = out.device ? batchEvent : cuda_ipc::EventHandle{};
      header->receiveEvent = cuda_ipc::EventHandle{};
      out.header = header;
      for (size_t i = 0; i < out.messages.size(); ++i) {
        const SendMessage& m = *out.messages[i];
        if (refused) {
          handles[i] = MemoryHandle{};
          continue;
        }
        if (!onDevice(m.device)) {
          // keepAlive: offered (tcp) until the batch ends
          keepAlive.emplace_back();
          const bool fits = mapsShm(out.peer) && m.bytes && m.bytes <= kInlineMessageBytes &&
                            inlineSpace + inlineBytes(m.bytes) <= inlineEnd;
          if (!fits || m.bytes > kAlwaysInlineBytes) {
            handles[i] = s.describe(m.data, m.bytes, &keepAlive.back());
            if (!fits || handles[i].shmName[0] != '\0') continue;  // read where it is
            keepAlive.back().reset();
          }
          std::memcpy(inlineSpace, m.data, m.bytes);
          handles[i] = s.describe(inlineSpace, m.bytes, &keepAlive.back());
          inlineSpace += inlineBytes(m.bytes);
          continue;
        }
        MemoryHandle h;
        h.kind = MemoryKind::Cuda;
        h.ownerRank = s.rank;
        h.nodeHash = s.peers[s.rank].nodeHash;
        h.size = m.bytes;
        const std::string what = rankPrefix(s.rank) + "send " + std::to_string(i) + " to rank " + std::to_string(out.peer);
        if (m.bytes) cuda_ipc::exportMemory(m.data, m.bytes, h, what.c_str());
        handles[i] = h;
      }
      space += manifestBytes(out.messages.size());
    }
    // Every manifest written (a buffer that cannot be shared is refused before any peer is told).
    for (Outgoing& out : outgoing) {
      Connection& link = s.link(out.peer);
      const MemoryHandle manifest = s.describe(out.header, manifestBytes(out.messages.size()));
      underway = true;
      link.postSend(manifest);
      link.signal(SemaphoreSet::SendReady, 0);
      out.want = ++sendsDone_[out.peer];
    }
    underway = true;
    for (Incoming& in : incoming) in.want = reading_[in.peer] ? 0 : ++sendsReady_[in.peer];

    auto fail = [&](std::exception_ptr e) {
      if (!firstFailure) firstFailure = e;
    };
    // Reads the peer's posted manifest (its SendReady was counted).
    auto readManifest = [&](const Incoming& in, auto&& what) {
      Connection& link = s.link(in.peer);
      auto r = std::make_unique<Reading>();
      r->post = link.peerSendPost();
      const MemoryHandle& post = r->post;
      if (post.size < sizeof(ManifestHeader) || (post.size - sizeof(ManifestHeader)) % sizeof(MemoryHandle) != 0)
        throw Error(ErrorCode::Internal, what() + ": its post of " + std::to_string(post.size) + " bytes is not a send manifest",
                    s.rank, in.peer);
      std::vector<char>& raw = manifestIn_;
      raw.resize(post.size);
      Connection& c = s.connection(in.peer, post);
      c.read(raw.data(), c.attach(post), 0, post.size);
      std::memcpy(&r->header, raw.data(), sizeof r->header);
      if ((r->header.magic != kManifestMagic && r->header.magic != kRefusedManifestMagic) ||
          manifestBytes(r->header.count) != post.size)
        throw Error(ErrorCode::Internal, what() + ": its post is not a send manifest", s.rank, in.peer);
      r->refusedSend = r->header.magic == kRefusedManifestMagic;
      r->sent.resize(r->header.count);
      std::memcpy(r->sent.data(), raw.data() + sizeof r->header, r->header.count * sizeof(MemoryHandle));
      return r;
    };
    // The receiver's half of one direction, when the peer posted or a manifest is being read:
    // compare and copy as many of its messages as this batch wants, answer the manifest once
    // every message of it is received, and wait for the peer's next manifest if this batch wants
    // more. A failure answers the manifest and ends the direction (the rest is not delivered).
    auto receive = [&](Incoming& in) {
      Connection& link = s.link(in.peer);
      std::unique_ptr<Reading>& reading = reading_[in.peer];
      int64_t status = kCopyFailed;
      bool posted = reading != nullptr;  // a manifest to answer if this fails
      // This batch's messages from the peer are the manifest's, one to one: a failure then leaves
      // the pair in step (both drop them). Otherwise part of the manifest, or of this batch, lies
      // in another batch of the other side, which the pair could no longer match: poisoned.
      bool whole = in.received == 0;  // (a batch that took messages already is not one to one)
      // For messages, built only when one is needed (a failure, GPU calls).
      auto call = [&] { return "recv of " + in.describe() + " from rank " + std::to_string(in.peer); };
      auto what = [&] { return rankPrefix(s.rank) + call(); };
      try {
        if (!reading) {
          posted = true;
          reading = readManifest(in, what);
        }
        Reading& r = *reading;
        const size_t take = std::min(in.messages.size() - in.received, r.sent.size() - r.next);
        whole = whole && r.next == 0 && take == r.sent.size() && take == in.messages.size();
        // "message 1" names a message of this batch when it has several; the sender's index
        // (r.next + i) goes in the status, which names it there.
        auto mine = [&](size_t i) { return in.messages.size() == 1 ? std::string("it") : "message " + std::to_string(in.received + i); };
        // A refused batch on either side moves nothing: its messages only take their places.
        const bool skip = refused || r.refusedSend;
        if (r.refusedSend && !refused && take)
          fail(std::make_exception_ptr(Error(
              ErrorCode::Mismatch,
              what() + ": rank " + std::to_string(in.peer) + " refused its send of " +
                  (take == 1 ? mine(0) : "messages " + std::to_string(in.received) + ".." + std::to_string(in.received + take - 1)) +
                  " (its call raised an error there before anything moved), so nothing was received from it",
              s.rank, in.peer)));
        if (refused && take && r.answer == kReceived) r.answer = kRecvRefused;
        for (size_t i = 0; !skip && i < take; ++i) {
          const MemoryHandle& sent = r.sent[r.next + i];
          const RecvMessage& m = *in.messages[in.received + i];
          if (sent.size != m.bytes) {
            status = sizeMismatch(r.next + i, m.bytes);
            if (in.messages.size() == 1)
              throw Error(ErrorCode::InvalidUsage, what() + ": it sent " + std::to_string(sent.size) + " bytes" +
                                                       (r.sent.size() == 1 ? "" : kMatchRule),
                          s.rank, in.peer);
            throw Error(ErrorCode::InvalidUsage, what() + ": " + mine(i) + " expects " + std::to_string(m.bytes) +
                                                     " bytes, it sent " + std::to_string(sent.size) + kMatchRule,
                        s.rank, in.peer);
          }
          const bool theirsOnDevice = sent.kind == MemoryKind::Cuda;
          if (!sent.size || theirsOnDevice == onDevice(m.device)) continue;
          status = kindMismatch(r.next + i);
          throw Error(ErrorCode::InvalidUsage, what() + ": " + (in.messages.size() == 1 ? std::string("it is ") : mine(i) + " is ") +
                                                   kindName(onDevice(m.device)) + " here but the sender's is " +
                                                   kindName(theirsOnDevice) + kMatchRule,
                      s.rank, in.peer);
        }
        // GPU messages: enqueued on the stream after the sender's batch event (and after the
        // copies an earlier batch made of this manifest), then, once the manifest is wholly
        // received, this direction's receive event, whose handle goes back in the sender's manifest.
        bool copiesOnDevice = false;
        for (size_t i = 0; !skip && i < take; ++i) copiesOnDevice |= r.sent[r.next + i].kind == MemoryKind::Cuda && r.sent[r.next + i].size;
        const bool last = r.next + take == r.sent.size();
        // The GPU work of this part: on the batch's stream, or, for the host-only last part of a
        // manifest an earlier batch received GPU messages of, on a side stream of that batch's
        // device (this batch has no stream of its own), where the receive event is recorded.
        void* on = stream;
        int onGpu = device;
        std::unique_ptr<cuda_ipc::CurrentDevice> lent;
        if (device < 0 && last && r.earlier) {
          onGpu = r.earlier->event->device();
          lent = std::make_unique<cuda_ipc::CurrentDevice>(onGpu, what());
          on = cuda_ipc::sideStream(onGpu, what());
        }
        if (copiesOnDevice) {
          cuda_ipc::waitForPeerEvent(r.header.batchEvent, on, what() + " (the sender's event)");
          r.touched = r.copiedOnDevice = true;
        }
        if (r.earlier && (copiesOnDevice || last)) {
          r.earlier->event->awaitOn(on, what() + " (an earlier batch's copies of the same send batch)");
          r.earlier.reset();
        }
        for (size_t i = 0; !skip && i < take; ++i) {
          const MemoryHandle& sent = r.sent[r.next + i];
          void* into = in.messages[in.received + i]->data;
          if (!sent.size) continue;
          if (sent.kind == MemoryKind::Cuda) {
            char* from = cuda_ipc::openPeerMemory(sent);
            try {
              cuda_ipc::copyOnStream(into, from, sent.size, on, what());
            } catch (const Error& e) {
              // Which import CUDA refused: the sender's memory as this process opened it.
              throw Error(e.code(), std::string(e.what()) + " (copying from the sender's GPU memory: " +
                                        cuda_ipc::describeImport(sent) + ")",
                          s.rank, in.peer);
            }
            continue;
          }
          Connection& d = s.connection(in.peer, sent);
          d.read(into, d.attach(sent), 0, sent.size);
        }
        // A sender whose batch failed poisons before its caller may free what it posted: bytes
        // read from its memory since then may be another array's, so they are no message.
        if (!skip && s.poisoned()) s.raisePoisoned(call(), in.peer);
        in.received += take;
        r.next += take;
        if (r.next == r.sent.size()) {
          // The sender's direction moves GPU bytes and this rank copied some (none when refused
          // receives took them all): the sender's stream waits for this event.
          if (r.header.batchEvent.ownerPid && r.copiedOnDevice) {
            if (receiveEvents_.empty()) receiveEvents_.resize(s.size);
            const cuda_ipc::EventHandle done =
                eventOf(receiveEvents_[in.peer], onGpu).record(on, what() + " (its receive event)");
            Connection& c = s.connection(in.peer, r.post);
            c.write(c.attach(r.post), offsetof(ManifestHeader, receiveEvent), &done, sizeof done);
          }
          const int64_t answer = r.answer;
          reading.reset();
          link.answerSendPost(answer);
          link.signal(SemaphoreSet::RecvDone, 0);
        }
        if (in.received == in.messages.size()) {
          in.done = true;
        } else {
          in.want = ++sendsReady_[in.peer];  // the rest come in the sender's next batch
        }
      } catch (...) {
        fail(std::current_exception());
        if (posted) {
          reading.reset();
          link.answerSendPost(status);
          link.signal(SemaphoreSet::RecvDone, 0);
        }
        in.done = true;
        // After the answer, so that the sender raises the mismatch itself (a wait that sees the
        // poison and its answer takes the answer); its next call on the pair fails.
        if (!whole && !s.poisoned()) {
          s.poison(what() + " failed on a send batch that is received over several batches, or in a batch that "
                          "receives several of the peer's: the pair can no longer match its messages");
          poisonedHere = true;
        }
      }
    };
    size_t pending = outgoing.size() + incoming.size();
    auto progress = [&] {
      for (Incoming& in : incoming)
        while (!in.done && __atomic_load_n(s.inboundWord(SemaphoreSet::SendReady, in.peer, 0), __ATOMIC_ACQUIRE) >= in.want) {
          receive(in);
          if (in.done) --pending;
        }
      for (Outgoing& out : outgoing)
        if (!out.done && __atomic_load_n(s.inboundWord(SemaphoreSet::RecvDone, out.peer, 0), __ATOMIC_ACQUIRE) >= out.want) {
          out.done = true;
          --pending;
          const int64_t status = s.link(out.peer).sendStatus();
          if (refused) continue;  // the caller raises its own error; the answer changes nothing
          // Later work on this stream (a write into the send buffer) waits for the receiver's
          // copies, also those of the messages received when a refused receive took another.
          if (out.device && (status == kReceived || status == kRecvRefused)) {
            try {
              cuda_ipc::EventHandle read;
              std::memcpy(&read, &out.header->receiveEvent, sizeof read);
              if (read.ownerPid)
                cuda_ipc::waitForPeerEvent(read, stream, rankPrefix(s.rank) + "send of " + out.describe() + " to rank " +
                                                              std::to_string(out.peer) + " (the receiver's event)");
            } catch (...) {
              fail(std::current_exception());
            }
          }
          if (status != kReceived) fail(std::make_exception_ptr(sendFailure(s.rank, out, status)));
        }
    };

    progress();
    while (pending) {
      // Wait on the first unfinished direction (its peer's liveness, its message on a timeout)
      // while every direction progresses.
      int peer = -1;
      const bool* done = nullptr;
      std::string what;
      for (const Incoming& in : incoming)
        if (!in.done && !done) {
          peer = in.peer, done = &in.done;
          what = (refused ? "refused recv from rank " : "recv of " + in.describe() + " from rank ") + std::to_string(peer) +
                 " (waiting for its send)";
        }
      for (const Outgoing& out : outgoing)
        if (!out.done && !done) {
          peer = out.peer, done = &out.done;
          what = (refused ? "refused send to rank " : "send of " + out.describe() + " to rank ") + std::to_string(peer) +
                 " (waiting for its recv)";
        }
      WaitOutcome outcome;
      try {
        outcome = waitUntil(
            [&] {
              progress();
              return *done;
            },
            s.waitPolicy(peer, s.timeout));
      } catch (const Error& e) {
        // Interrupted (Ctrl-C) with sends posted or receives counted: the pairs are out of step (a
        // peer may still read a buffer the caller frees), so no later call may trust them. (Other
        // failures of a wait poison where they are raised.)
        if (e.code() == ErrorCode::Interrupted) s.poison(rankPrefix(s.rank) + what + " was interrupted");
        throw;
      }
      // Poisoned by this batch's own failure (a mismatch in a split manifest): that is the error.
      if (outcome == WaitOutcome::Aborted && poisonedHere) std::rethrow_exception(firstFailure);
      if (outcome != WaitOutcome::Ready) s.raiseWaitFailure(outcome, peer, what, s.timeout);
    }
  } catch (const std::exception& e) {
    if (underway && !s.poisoned())
      s.poison(rankPrefix(s.rank) + "a point-to-point batch failed part-way (its peers were told of it): " + e.what());
    if (!underway && !refused) refuse(sends, recvs);  // a buffer that could not be shared, ...
    throw;
  }
  if (device < 0) {
    if (firstFailure) std::rethrow_exception(firstFailure);
    return nullptr;
  }
  // The batch's completion: after every copy into this rank and every wait for a receiver's copy.
  // Made when a direction failed too: a manifest this batch received part of on the GPU is
  // received further by a later batch, whose stream must wait for these copies.
  auto done = std::make_shared<DeviceCompletion>();
  done->event = std::make_unique<cuda_ipc::SharedEvent>(device, gpuWhat);
  done->event->record(stream, gpuWhat + " (its completion event)");
  for (const Outgoing& out : outgoing) done->peers.push_back(out.peer);
  for (const Incoming& in : incoming) {
    done->peers.push_back(in.peer);
    // A manifest this batch copied part of on the GPU: the batch that receives the rest waits for this one.
    if (Reading* r = reading_[in.peer].get(); r && r->touched) {
      r->earlier = done;
      r->touched = false;
    }
  }
  {
    std::lock_guard<std::mutex> g(completionsMu_);
    while (!completions_.empty() && completions_.front()->event->reached(gpuWhat)) completions_.pop_front();
    completions_.push_back(done);
  }
  if (firstFailure) std::rethrow_exception(firstFailure);
  return done;
}

bool PointToPoint::awaitCompletion(Communicator::State& s, const std::shared_ptr<DeviceCompletion>& done,
                                   bool block) {
  if (!done) return true;
  const std::string what = rankPrefix(s.rank) + "a send/recv batch on GPU memory";
  if (!block) return done->event->reached(what);
  // The GPU work of the batch waits for its peers' streams: a peer that died is named (the wait
  // itself watches the first peer, the watch the others).
  const int first = done->peers.empty() ? -1 : done->peers.front();
  const std::string waiting = "send/recv batch on GPU memory (waiting for the GPU to finish it)";
  // Not the first peer's leaving: the event may wait on another peer's stream while the first,
  // done with its part, destroyed its communicator.
  WaitPolicy policy = s.waitPolicy(first, s.timeout);
  policy.peerLeft = nullptr;
  const WaitOutcome outcome = waitUntil([&] { return done->event->reached(what); }, policy, [&] {
    for (int peer : done->peers)
      if (s.waitPolicy(peer, s.timeout).peerPid > 0 && !processAlive(s.peers[peer].pid))
        s.raiseWaitFailure(WaitOutcome::PeerDead, peer, waiting, s.timeout);
  });
  if (outcome != WaitOutcome::Ready) s.raiseWaitFailure(outcome, first, waiting, s.timeout);
  return true;
}

void PointToPoint::track(std::shared_ptr<Work> queued) {
  std::lock_guard<std::mutex> g(completionsMu_);
  while (!queued_.empty() && queued_.front()->completed()) queued_.pop_front();
  queued_.push_back(std::move(queued));
}

void PointToPoint::synchronize() {
  // Queued batches on GPU memory first (they enqueue their GPU work when they run), each raising
  // its own error once; then the GPU work of every batch.
  for (;;) {
    std::shared_ptr<Work> oldest;
    {
      std::lock_guard<std::mutex> g(completionsMu_);
      if (queued_.empty()) break;
      oldest = queued_.front();
      queued_.pop_front();
    }
    oldest->wait();
  }
  for (;;) {
    std::shared_ptr<DeviceCompletion> oldest;
    {
      std::lock_guard<std::mutex> g(completionsMu_);
      if (completions_.empty()) return;
      oldest = completions_.front();
    }
    awaitCompletion(*state_, oldest, true);
    std::lock_guard<std::mutex> g(completionsMu_);
    if (!completions_.empty() && completions_.front() == oldest) completions_.pop_front();
  }
}

}  // namespace forestcc::collectives
