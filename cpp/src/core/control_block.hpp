// Per-rank control block in shared memory: inbound semaphore counters (one 64-byte line each, so
// two counters never share a cache line) and the communicator's abort flag, which any rank on the
// node may set to wake every waiter here with an error.
#pragma once

#include <atomic>
#include <cstdint>

namespace forestcc {

struct alignas(64) SemaphoreSlot {
  uint64_t value;  // accessed with __atomic builtins (shared with SemaphoreDeviceHandle)
};

struct alignas(64) ControlHeader {
  uint64_t magic;
  std::atomic<uint32_t> abortBy;   // 0 healthy; otherwise 1 + the rank that poisoned it
  std::atomic<uint32_t> messageReady;
  char abortMessage[512];
};

constexpr uint64_t kControlMagic = 0x4c52544343434f46ull;  // "FOCCCTRL"
constexpr int kSemaphoreSlots = 4096;

// Plan channels need no handshake: the semaphore of the i-th channel pair between two ranks sits
// at a fixed place, [local index of the signalling rank][i], in the receiving rank's block.
constexpr int kMaxLocalRanks = 128;
constexpr int kMaxPlanChannelsPerPeer = 64;  // forests on 64-rank topologies need 64 (tree_plan.py)

// Where a rank's buffer of the current call lives, for peers that read or write it: a forestcc
// shared segment (mapped by peers) or plain process memory (single-copy cross-process access).
struct BufferDescriptor {
  uint64_t segmentId;   // 0: not in a shared segment; else a hash of segmentName
  uint64_t segmentSize;
  uint64_t offset;      // of the buffer inside the segment
  uint64_t address;     // in the owner's address space
  uint64_t bytes;
  char segmentName[96];
};

// What a rank publishes when it enters a collective call, before its first signal: peers read it
// only after a signal chain from that rank (the plans' entry rule), so plain stores suffice.
constexpr int kMaxVariableBlocks = 512;  // all_to_all_v rank limit
// A call's number, the generator of its plan, its block size and root: peers compare it with
// their own to notice ranks that chose different algorithms or disagree on the call.
constexpr int kPlanFamilyChars = 32;
struct CallStamp {
  uint64_t sequence;
  uint64_t blockBytes;  // count x element size (0 for all_to_all_v, whose blocks differ)
  int64_t root;
  char family[kPlanFamilyChars];
};

struct alignas(64) CallMailbox {
  uint64_t sequence;            // collective calls entered on this communicator
  // Plans check byCall[sequence mod 2] before they touch a peer's memory (the peer is then in
  // this call: its sequence is checked first). Eager plans check, at the end of a call,
  // byEagerCall[bank]: a peer may be calls ahead by then, but not two eager calls.
  CallStamp byCall[2];
  CallStamp byEagerCall[2];
  BufferDescriptor buffers[3];  // input, output, scratch (plan::Buffer order)
  // all_to_all_v: element offsets of the input (0) and output (1) blocks, nranks + 1 each.
  uint64_t blockOffsets[2][kMaxVariableBlocks + 1];
};

// Point-to-point send/recv (rendezvous): the sender posts its buffer for the receiver here, then
// signals; the receiver copies, stores a status and signals back.
struct alignas(64) SendPost {
  BufferDescriptor buffer;
  uint64_t sequence;
  int64_t status;  // written by the receiver: 0 ok, otherwise the receiver's byte count + 1
};

// Eager plans (scratch_banks 2) keep their scratch here, not in a per-call segment: peers map
// the control block when the communicator is made, so they can write a rank's bank before it
// enters a call. Bank b serves the eager calls numbered b, b + 2, ... (schedules/README.md,
// "Scratch banks"). Pages are touched only when used.
constexpr uint64_t kScratchBankBytes = 1 << 20;
struct alignas(4096) ScratchBanks {
  char bank[2][kScratchBankBytes];
};

struct ControlBlock {
  ControlHeader header;
  SemaphoreSlot slots[kSemaphoreSlots];
  SemaphoreSlot planSlots[kMaxLocalRanks][kMaxPlanChannelsPerPeer];
  SemaphoreSlot sendReady[kMaxLocalRanks];  // inbound: that rank posted a send to this one
  SemaphoreSlot recvDone[kMaxLocalRanks];   // inbound: that rank finished receiving our send
  CallMailbox mailbox;
  SendPost sendPosts[kMaxLocalRanks];       // indexed by the receiver's local index
  ScratchBanks scratchBanks;
};

}  // namespace forestcc
