// Per-rank control block in shared memory: inbound semaphore counters (one 64-byte line each, so
// two counters never share a cache line) and the communicator's abort flag, which any rank on the
// node may set to wake every waiter here with an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "forestcc/error.hpp"
#include "forestcc/memory.hpp"

namespace forestcc {

struct alignas(64) SemaphoreSlot {
  uint64_t value;  // accessed with __atomic builtins (shared with SemaphoreDeviceHandle)
};

struct alignas(64) ControlHeader {
  uint64_t magic;
  std::atomic<uint32_t> abortBy;   // 0 healthy; otherwise 1 + the rank that poisoned it
  std::atomic<uint32_t> messageReady;
  std::atomic<uint32_t> abortCode;  // the ErrorCode of the error that poisoned it
  std::atomic<uint64_t> abortCall;  // the collective call it happened in (0: none)
  // Set by the rank when its communicator is destroyed (Communicator::State's destructor): its
  // same-node peers' waits on it then fail at once, as a tcp peer's goodbye makes them, not at
  // the timeout. What it signalled before is visible to whoever sees this (a release store).
  std::atomic<bool> left;
  char abortMessage[4096];  // FORESTCC_DEBUG tables of a mismatch fit
};

// Poisons the block's communicator on behalf of `rank` (the first poisoner wins): abortBy first,
// then the message, code and call, then messageReady, so a reader that saw abortBy waits briefly
// for the rest. Both the rank itself and its same-node peers' connections write it.
inline void storeAbort(ControlHeader& h, int rank, const std::string& reason, ErrorCode code, uint64_t call) {
  uint32_t expected = 0;
  if (!h.abortBy.compare_exchange_strong(expected, static_cast<uint32_t>(rank + 1))) return;
  std::snprintf(h.abortMessage, sizeof h.abortMessage, "%s", reason.c_str());
  h.abortCode.store(static_cast<uint32_t>(code), std::memory_order_relaxed);
  h.abortCall.store(call, std::memory_order_relaxed);
  h.messageReady.store(1, std::memory_order_release);
}

// Wakes a rank's sleeping waiters. A waiter that has spun and yielded without its signal counts
// itself in `sleepers` and sleeps on the futex `rings`; whoever signals the rank then bumps `rings`
// and wakes it (transport/doorbell.hpp), so a rank that shares its CPU with others gives it up
// while it waits, yet wakes as soon as its signal lands. Its own cache line: sleepers change
// while signallers read it.
struct alignas(64) Doorbell {
  std::atomic<uint32_t> rings;
  std::atomic<uint32_t> sleepers;
};

constexpr uint64_t kControlMagic = 0x4c52544343434f46ull;  // "FOCCCTRL"
constexpr int kSemaphoreSlots = 4096;

// Plan channels need no handshake: the semaphore of the i-th channel pair between two ranks sits
// at a fixed place, [local index of the signalling rank][i], in the receiving rank's block.
constexpr int kMaxLocalRanks = 128;
constexpr int kMaxPlanChannelsPerPeer = 64;  // forests on 64-rank topologies need 64 (tree_plan.py)

// What a rank publishes when it enters a collective call, before its first signal: peers read it
// only after a signal chain from that rank (the plans' entry rule), so plain stores suffice.
constexpr int kMaxVariableBlocks = 512;  // all_to_all_v rank limit
// What a call is, as every rank states it on entry: its number, the plan (a hash of the whole
// plan, every rank's program included, so two ranks can only agree when they run the same plan
// file or generate the same built-in plan), and the call's arguments. Peers compare it with their
// own before their data depends on each other (schedules/README.md, "Call stamps"), in every
// build: collective, root, dtype, op and count are a few bytes, so nothing is checked only under
// FORESTCC_DEBUG.
constexpr int kPlanFamilyChars = 32;
struct alignas(64) CallStamp {  // one cache line: a peer rewriting its next slot never shares it
  uint64_t sequence;    // 0 while being rewritten (a seqlock: readers retry or give up)
  uint64_t planHash;
  uint64_t count;       // elements per block (0 for all_to_all_v, whose blocks differ)
  int32_t root;
  uint8_t collective;   // plan::Collective, or kRefusedCall
  uint8_t dtype;        // DataType
  uint8_t op;           // ReduceOp, | kPreMultipliedOp for a sum of scaled inputs
  uint8_t variable;     // 1: all_to_all_v
  char family[kPlanFamilyChars];  // the plan's generator, for messages
};
// The collective of a refused call's stamp: the rank raised an error before its part of the call
// began (its arguments, its plan) and published this in the call's place (Executor::refuseCall).
constexpr uint8_t kRefusedCall = 0xff;
// In a stamp's op: the reduction's inputs were scaled per rank (CallOptions::preMultiplied).
constexpr uint8_t kPreMultipliedOp = 0x80;

// Stamps of the last kStampHistory calls, by sequence mod kStampHistory. A rank may run ahead of
// a peer (a non-root that only signals, say), but every kStampWindow calls it waits until every
// connected peer has entered the call kStampWindow before, so no rank gets kStampHistory calls
// ahead and a peer always finds its stamp of the call it checks.
constexpr uint64_t kStampHistory = 64;
constexpr uint64_t kStampWindow = kStampHistory / 2;

// A same-node rank's hold on another's call buffers, written by the holder only: `held` is the
// last call in which it may write into them, `released` the last it let go of; it holds them
// while held > released. One cache line per holder, which the owner reads only when it fails.
struct alignas(64) BufferHold {
  uint64_t held;
  uint64_t released;
};

// Point-to-point send/recv (rendezvous): the sender posts its buffer for the receiver here, then
// signals (SemaphoreSet::SendReady); the receiver copies, answers with a status and signals back
// (SemaphoreSet::RecvDone).
struct alignas(64) SendPost {
  MemoryHandle buffer;
  uint64_t sequence;
  int64_t status;  // written by the receiver: 0 ok, -1 failed to copy, else its byte count + 1
};

// Everything a rank states about its calls for its peers to read (through their connection to it,
// Connection::peer*): the collective it is in, the stamps, its buffers, and its sends.
struct alignas(64) CallMailbox {
  uint64_t sequence;            // collective calls entered on this communicator (release store)
  // Plans check byCall[sequence mod kStampHistory] before they touch a peer's memory and after
  // each wait on a peer. Eager plans check, at the end of a call, byEagerCall[bank]: a peer may be
  // calls ahead by then, but not two eager calls.
  CallStamp byCall[kStampHistory];
  CallStamp byEagerCall[2];
  MemoryHandle handles[3];      // input, output, scratch (plan::Buffer order)
  // all_to_all_v: element offsets of the input (0) and output (1) blocks, nranks + 1 each.
  uint64_t blockOffsets[2][kMaxVariableBlocks + 1];
  SendPost sendPosts[kMaxLocalRanks];  // indexed by the receiver's local index
};

// Calls on GPU memory (the CUDA runner, cpp/src/cuda/device_runner.*): a rank publishes the
// CUDA IPC handles of its buffers for each call here, kept for the last kDeviceHistory calls,
// since its host may enqueue calls ahead of a peer's: a peer opens them before it launches the
// call's kernel. A rank publishes call n only once every peer of the plan entered call
// n - kDeviceHistory + 1, so the record a peer reads is never rewritten under it. `sequence` is
// 0 while the record is written, then the call's number (a release store).
constexpr uint64_t kDeviceHistory = 4;
constexpr int kMaxDeviceVariableRanks = 16;  // all_to_all_v on GPU memory: rank limit
struct alignas(64) DeviceCallRecord {
  uint64_t sequence;
  MemoryHandle handles[3];  // input, output, scratch (plan::Buffer order); size 0: none
  // all_to_all_v: element offsets of the input (0) and output (1) blocks, nranks + 1 each.
  uint64_t blockOffsets[2][kMaxDeviceVariableRanks + 1];
};
struct alignas(64) DeviceMailbox {
  MemoryHandle semaphores;  // this rank's inbound semaphore words in device memory (size 0: none yet)
  // The CUDA device this rank's runner uses (its UUID), written before `semaphores`: peers on the
  // same device synchronize at GPU scope, cheaper than system scope.
  uint8_t deviceUuid[16];
  // This rank's two scratch banks for eager plans on GPU memory (2 x kBankStride of device
  // memory, made at its first such call; size 0: none yet). Written before the record of that
  // call, so a peer that entered the call can open them.
  MemoryHandle banks;
  DeviceCallRecord calls[kDeviceHistory];
};

// Eager plans (scratch_banks 2) keep their scratch here, not in a per-call segment: peers map
// the control block when the communicator is made, so they can write a rank's bank before it
// enters a call. Bank b serves the eager calls numbered b, b + 2, ... (schedules/README.md,
// "Scratch banks"). Pages are touched only when used.
// Each bank is followed by its packet slots (executor/packets.hpp), which nothing but packets
// is ever written into: a slot holds either nothing (zero) or a packet of an earlier call, never
// data that could pass for a packet of this one.
constexpr uint64_t kScratchBankBytes = 1 << 20;
constexpr uint64_t kPacketBankBytes = 512 << 10;
constexpr uint64_t kBankStride = kScratchBankBytes + kPacketBankBytes;
struct alignas(4096) ScratchBanks {
  char bank[2][kBankStride];  // bank b: its scratch, then from kScratchBankBytes its packet slots
};

struct ControlBlock {
  ControlHeader header;
  Doorbell doorbell;
  SemaphoreSlot slots[kSemaphoreSlots];
  SemaphoreSlot planSlots[kMaxLocalRanks][kMaxPlanChannelsPerPeer];
  SemaphoreSlot sendReady[kMaxLocalRanks];  // inbound: that rank posted a send to this one
  SemaphoreSlot recvDone[kMaxLocalRanks];   // inbound: that rank finished receiving our send
  // Indexed by the writer's local index: the calls in which that rank may write into this
  // rank's buffers (Connection::holdBuffers); a rank leaving a failed call waits until none holds
  // them before its caller may free them (Communicator::State::awaitBufferHolders).
  BufferHold bufferHolds[kMaxLocalRanks];
  CallMailbox mailbox;
  DeviceMailbox deviceMailbox;
  ScratchBanks scratchBanks;
};

}  // namespace forestcc
