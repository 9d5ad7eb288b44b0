// What the CUDA runner's host side (device_runner.cu) hands its kernel (device_kernel.cu): plain
// data, passed by value as the kernel's parameters, so a captured CUDA graph replays a call with
// the same buffers and no host work.
#pragma once

#include <cstdint>

#include "executor/interpreter.hpp"
#include "forestcc/collectives.hpp"

namespace forestcc::executor {

// Distinct peers one plan may reach on GPU memory (parameters stay well under 4 KB).
constexpr int kMaxDevicePeers = 32;
// Thread blocks per plan worker at most, and threads per block.
constexpr int kMaxBlocksPerWorker = 16;
constexpr int kDeviceThreads = 512;

// A plan channel on the GPU, made once per plan: semaphore words in device memory.
struct DeviceChannel {
  int32_t peer;
  int32_t peerSlot;    // index into LaunchArgs::peers; -1: loopback (this rank's own buffers)
  uint64_t* inbound;   // this rank's word the peer signals
  uint64_t* outbound;  // the peer's word this rank signals (its memory, opened through CUDA IPC)
  uint64_t* expected;  // signals consumed before this call (this rank's; the kernel moves it)
};

// A peer's buffers of this call, opened in this process.
struct DevicePeer {
  char* buffers[3];
  uint64_t bytes[3];
  const uint64_t* offsets[2];  // all_to_all_v: its input and output block offsets; else null
};

// The first failure of a launch, in mapped host memory: the host reads it once the call ended.
struct DeviceFailure {
  uint32_t flag;  // 0: none; 1: recorded
  int32_t worker;
  Failure failure;
};

struct LaunchArgs {
  const plan::Op* ops;          // every worker's ops, back to back (device memory)
  const uint32_t* opBegin;      // worker w: ops[opBegin[w], opBegin[w + 1])
  const DeviceChannel* channels;
  uint32_t channelCount;
  uint32_t workers;
  uint32_t blocksPerWorker;
  CallGeometry geometry;        // this rank's buffers (device pointers)
  DevicePeer peers[kMaxDevicePeers];
  DataType dtype;
  ReduceOp op;
  uint64_t timeoutNs;           // a wait's deadline (FORESTCC_TIMEOUT)
  // Zeroed before each launch: [workers] barrier counters, [1] abort flag, then
  // [workers * blocksPerWorker][channelCount] waits done per block and channel.
  uint32_t* launchScratch;
  const volatile uint32_t* hostAbort;  // set by the host: a peer died, the communicator was poisoned
  DeviceFailure* failure;
  // Every peer of the plan runs on this GPU: signals and waits at GPU scope, not system scope.
  bool gpuScope;
  // Each block zeroes what it used of launchScratch before it ends (one block per worker, no
  // failure), so the next launch needs no memset.
  bool leaveScratchZero;
  // Eager plans (scratch_banks 2), else null: the runner's count of its eager launches, then a
  // word for the blocks that finished this launch (both device memory). The launch uses scratch
  // bank `count mod 2` (geometry.local[2] and the peers' scratch are bank 0, bank 1 follows it
  // at kDeviceBankStride), with packet flag packetFlag(count), and its last block to finish adds
  // one. Counted on the GPU, not by the host, so that a replayed CUDA graph takes the next bank
  // each time, as a launch would.
  uint64_t* eagerCalls;
};

// From one scratch bank to the next (kBankStride of transport/control_block.hpp, which this
// header does not include: the kernel is compiled apart from the transports).
constexpr uint64_t kDeviceBankStride = (1 << 20) + (512 << 10);

// Bytes of launchScratch a launch needs.
inline uint64_t launchScratchBytes(uint32_t workers, uint32_t blocksPerWorker, uint32_t channels) {
  return sizeof(uint32_t) * (workers + 1 + uint64_t(workers) * blocksPerWorker * channels);
}

// Zeroes the first `clearBytes` of the launch scratch (0: the last launch left it zero) and
// launches the plan's kernel on `stream`; false: the launch failed (the caller reads cudaGetLastError).
bool launchPlan(const LaunchArgs& args, uint64_t clearBytes, void* stream);

}  // namespace forestcc::executor

namespace forestcc::executor {
// Avg: divides n elements of the output by `by` on `stream` (after the plan's kernel).
bool launchDivide(void* data, uint64_t n, DataType dtype, uint32_t by, void* stream);
// Loads runPlan and every divideKernel into the current device's context (forestcc::cudaLoadKernels).
bool loadKernels();
}  // namespace forestcc::executor
