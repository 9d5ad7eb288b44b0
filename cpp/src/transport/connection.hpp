// A connection: everything this rank does to one peer goes through it. The executor, send/recv
// and the channels of Communicator::connect() see only this interface, so a transport is a folder
// under transport/ that implements it and Transport (transport.hpp; shm, cma, tcp; cuda_ipc
// later), never an edit of theirs.
//
// A connection carries (docs/architecture.md):
//   memory     attach a handle the peer registered (MemoryHandle) and read/write it one-sidedly;
//   signals    a release add on one of the peer's inbound semaphore counters, ordered after this
//              connection's earlier writes (so data is visible before the flag);
//   calls      the per-call protocol of collectives: the peer's call number, its stamps (what it
//              says the call is), the handles of its buffers for the call, and its eager scratch
//              banks; and the posts of point-to-point sends;
//   abort      the communicator's poison, so a failure here wakes the peer's waiters too.
// Memory may be reached by loads and stores (RemoteRegion::mapped: shm, CUDA IPC) or only
// through write()/read() (cma, tcp). Everything here may be called from several worker threads
// at once, on different regions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/control_block.hpp"
#include "forestcc/error.hpp"
#include "forestcc/memory.hpp"

namespace forestcc {

// A peer's memory as one connection reaches it. Plain data: the interpreter holds these.
struct RemoteRegion {
  char* mapped = nullptr;  // non-null: loads and stores reach it
  uint64_t address = 0;    // in the owner's address space (write()/read() use it)
  uint64_t size = 0;
};

// Which of the peer's inbound semaphore counters a signal lands on (control_block.hpp).
enum class SemaphoreSet : uint8_t {
  Channel,    // index: the peer's slot of a user channel (Communicator::connect)
  Plan,       // index: the plan-channel pair number between the two ranks
  SendReady,  // index unused: this rank posted a send to the peer
  RecvDone,   // index unused: this rank finished receiving the peer's send
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual TransportKind transport() const = 0;
  virtual int peer() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  // Whether this connection can reach the memory `h` describes (registered by the peer).
  virtual bool reaches(const MemoryHandle& h) const = 0;
  // The memory `h` describes, as reached here (mapped once and cached where that applies).
  virtual RemoteRegion attach(const MemoryHandle& h) = 0;
  // One-sided copies between local memory and [offset, offset+bytes) of a region of this peer.
  // Complete on return for shm and cma; a proxied transport queues them and flush() waits.
  virtual void write(const RemoteRegion& dst, uint64_t offset, const void* src, uint64_t bytes) = 0;
  virtual void read(void* dst, const RemoteRegion& src, uint64_t offset, uint64_t bytes) = 0;
  virtual void flush() = 0;
  // How much a reader that reduces what it reads (get_reduce) should fetch per read(): small
  // enough to stay in L2 where a read is a system call, large where each is a round trip.
  virtual uint64_t readTileBytes() const { return 256 << 10; }

  // ---- signals ------------------------------------------------------------------------------
  // The peer's counter, where it is mapped here (the interpreter adds to it directly), else null.
  virtual uint64_t* signalWord(SemaphoreSet set, int index) = 0;
  // The peer's doorbell, non-null wherever signalWord is (ring it after adding to the word).
  virtual Doorbell* peerDoorbell() { return nullptr; }
  // A release add of 1 on that counter, after every write issued on this connection before it.
  virtual void signal(SemaphoreSet set, int index) = 0;
  // This rank's counter that the peer's signals on (set, index) land in (waits poll it).
  virtual uint64_t* inboundWord(SemaphoreSet set, int index) = 0;

  // ---- the per-call protocol ----------------------------------------------------------------
  // This rank entered a call and wrote its own mailbox (Communicator::State::mailbox()). A
  // transport whose peer reads that mailbox in place (shm, cma) does nothing; one whose peer
  // cannot (tcp) sends it what changed.
  virtual void callPublished(const CallMailbox& mine) { (void)mine; }
  // The collective call the peer has entered (a release store on its side: once this reads past a
  // call, every signal the peer sent in it has landed).
  virtual uint64_t peerSequence() = 0;
  // The peer's stamp in the slot of call `sequence` (a seqlock read); false when it could not be
  // read whole (being rewritten). out.sequence says which call it is of: the slot is reused.
  virtual bool peerStamp(uint64_t sequence, CallStamp& out) = 0;
  // Its stamp of the eager call that uses scratch bank `bank`.
  virtual bool peerEagerStamp(int bank, CallStamp& out) = 0;
  // The handles of the peer's input, output and scratch buffers for its current call, and the
  // element offsets of its all_to_all_v blocks (nranks + 1 each; valid during that call).
  virtual const MemoryHandle& peerBuffer(int buffer) = 0;
  virtual const uint64_t* peerBlockOffsets(int buffer) = 0;
  // The peer's eager scratch bank (schedules/README.md, "Scratch banks"), reachable before the
  // peer entered the call.
  // The peer's records of its calls on GPU memory (control_block.hpp, DeviceMailbox); null where
  // the connection cannot read them (another node).
  virtual const DeviceMailbox* peerDeviceMailbox() { return nullptr; }
  virtual RemoteRegion peerBank(int bank) = 0;

  // ---- point-to-point -----------------------------------------------------------------------
  // Posts a send of `buffer` to the peer (before signalling SendReady), and reads the peer's
  // answer to it (after its RecvDone signal): 0 received, -1 failed to copy, bytes + 1 for a
  // size mismatch.
  virtual void postSend(const MemoryHandle& buffer) = 0;
  virtual int64_t sendStatus() = 0;
  // The send the peer posted to this rank (its buffer's handle and the post's status word).
  virtual const MemoryHandle& peerSendPost() = 0;
  // Answers the peer's post: 0 received, -1 failed to copy, bytes + 1 for a size mismatch.
  virtual void answerSendPost(int64_t status) = 0;

  // ---- the communicator's poison ------------------------------------------------------------
  // Poisons the peer's side of the communicator (the first poisoner wins there), so every wait of
  // the peer wakes with an error naming this rank and `reason`; `code` is the kind of error that
  // did it, `call` the collective call it happened in (0: none). Communicator::State::poison.
  virtual void abort(const std::string& reason, ErrorCode code, uint64_t call) = 0;

  // ---- this rank's hold on the peer's call buffers --------------------------------------------
  // A same-node peer's buffers are written in place (shm stores, cma writes), so a peer leaving a
  // failed call must not hand them back to its caller while this rank may still write into
  // them. A rank holds the buffers of the peers its plan puts into from the start of call `call`
  // until all its workers are done with it: holdBuffers() says so in the peer's control block,
  // then returns false (let go again) when the peer is already poisoned: it is leaving the call,
  // touch nothing. Transports whose writes the peer's own process applies (tcp, which discards
  // puts once poisoned) need neither.
  virtual bool holdBuffers(uint64_t call) { (void)call; return true; }
  virtual void releaseBuffers(uint64_t call) { (void)call; }

  // ---- the peer's end ------------------------------------------------------------------------
  // Set once the peer has left (destroyed its communicator) and all it sent was applied: tcp
  // (its goodbye, then its closed end) and same-node connections (its control block's `left`);
  // null for a transport that cannot tell.
  virtual const std::atomic<bool>* peerLeftFlag() const { return nullptr; }
};

}  // namespace forestcc
