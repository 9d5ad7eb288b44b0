// The CUDA runner's host side: calls on GPU memory. Per call it does on the host what the CPU
// runner does (the call's number and stamp, the stamp checks against every peer of the plan),
// publishes the CUDA IPC handles of its buffers for this call (DeviceMailbox, control_block.hpp),
// opens the peers' handles of the same call (once per allocation), and launches one kernel on
// the caller's stream (device_kernel.cu). It never waits for the GPU inside a call: an error the
// kernel hit is recorded in mapped host memory and raised by the next call, synchronize() or a
// Work's wait(), with the rank, the peer and the step. While the host waits for the GPU it
// watches the peers' processes and the communicator's poison, and aborts the kernels when either
// says the call cannot finish, so a dead peer never leaves a GPU spinning.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/on_error.hpp"
#include "core/state.hpp"
#include "core/wait.hpp"
#include "cuda/device_launch.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/device_runner.hpp"
#include "executor/executor.hpp"
#include "forestcc/error.hpp"
#include "transport/cuda_ipc/ipc_memory.hpp"
#include "transport/shm/shm_segment.hpp"
#include "transport/stamp_seqlock.hpp"

namespace forestcc::executor {

namespace {

constexpr int kFailureSlots = 64;  // calls in flight at most; slot kFailureSlots: captured calls
constexpr uint64_t kSemaphoreWords = uint64_t(kMaxLocalRanks) * kMaxPlanChannelsPerPeer;
// all_to_all_v's block offsets of one call in mapped host memory (the kernel reads them there):
// this rank's, then each peer slot's, input and output, kMaxDeviceVariableRanks + 1 each.
constexpr uint64_t kOffsetWords = uint64_t(1 + kMaxDevicePeers) * 2 * (kMaxDeviceVariableRanks + 1);

void check(cudaError_t e, int rank, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(ErrorCode::System, rankPrefix(rank) + what + ": " + cudaGetErrorString(e), rank);
}

bool deviceReduces(DataType t) {
  switch (t) {
    case DataType::Int8: case DataType::Uint8: case DataType::Int32: case DataType::Uint32:
    case DataType::Int64: case DataType::Uint64: case DataType::Float16: case DataType::BFloat16:
    case DataType::Float32: case DataType::Float64: case DataType::Float8E4M3: case DataType::Float8E5M2:
      return true;
    default:
      return false;
  }
}

// Device memory this runner owns, freed with it.
struct DeviceBuffer {
  char* data = nullptr;
  uint64_t size = 0;
};

}  // namespace

class CudaRunner : public DeviceRunner {
 public:
  explicit CudaRunner(Executor& ex);
  ~CudaRunner() override;
  void enqueue(const CompiledPlan& plan, const CallBuffers& call, int standIn, void* stream) override;
  void synchronize() override;
  std::function<bool(bool)> completion() override;

 private:
  // A plan on the device, made on its first call on GPU memory.
  struct Image {
    plan::Op* ops = nullptr;
    uint32_t* opBegin = nullptr;
    DeviceChannel* channels = nullptr;
    uint32_t channelCount = 0, workers = 0;
    std::vector<int> peers;  // peer slot -> rank
  };
  struct InFlight {
    cudaEvent_t done;
    uint64_t sequence;
    const CompiledPlan* plan;
    CallStamp stamp;
    int slot;
  };

  Communicator::State& state() { return *ex_.state_; }
  // The device's address of mapped host memory this runner allocated (found once, at
  // construction: the allocations never move).
  template <class T>
  T* mapped(T* host) const {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(host) - reinterpret_cast<char*>(hostMapped_) + mappedBase_);
  }  Image& image(const CompiledPlan& p);
  void buildChannels(const CompiledPlan& p, Image& img);
  char* grow(DeviceBuffer& b, uint64_t bytes, bool capturing, const char* what);
  // `offsets` (all_to_all_v, else null): where the peers' block offsets go, by slot. `eager`:
  // the call's scratch is each peer's banks (their first; the kernel picks the bank).
  void openPeers(Executor::Call& call, const Image& img, LaunchArgs& args, uint64_t* offsets, bool eager);
  // This rank's scratch banks in device memory, made and published at its first eager call.
  char* banks(bool capturing);
  // Retires the calls in flight up to call `upTo`, raising the first error one recorded:
  // block, waiting for each; else only those already finished.
  void reap(bool block, uint64_t upTo = UINT64_MAX);
  void waitFor(const InFlight& f);
  void raiseRecorded(const InFlight& f);
  void checkCaptured();
  // Copies `bytes` of host memory to the device, or clears device memory, on setup_ and waits for
  // that stream only.
  void upload(void* dst, const void* src, size_t bytes, const char* what);
  void clear(void* dst, size_t bytes, const char* what);

  Executor& ex_;
  // The runner's own stream for its setup (clearing its memory, uploading plans). The host waits
  // for this stream alone, never for the device: the caller's stream may hold work that waits for
  // something outside this call (a cuStreamWaitValue on a flag, a peer's event), and a call must
  // reach its host rendezvous however far behind its stream is.
  cudaStream_t setup_ = nullptr;
  int device_ = 0;
  uint8_t uuid_[16] = {};           // this runner's CUDA device
  uint64_t dirty_ = 0;              // bytes of launchScratch_ that may be non-zero after the last launch
  uint64_t* semaphores_ = nullptr;  // inbound words [local index of the signaller][pair]
  uint64_t* expected_ = nullptr;    // [rank][pair] signals consumed
  std::vector<uint64_t*> peerSemaphores_;  // by rank, opened on first use
  uint32_t* hostAbort_ = nullptr;   // mapped host memory (the kernels poll it)
  DeviceFailure* failures_ = nullptr;  // mapped host memory, kFailureSlots + 1
  uint64_t* offsets_ = nullptr;        // mapped host memory, kFailureSlots x kOffsetWords
  // One mapped allocation holds hostAbort_, failures_ and offsets_: its host and device bases.
  void* hostMapped_ = nullptr;
  char* mappedBase_ = nullptr;
  DeviceBuffer scratch_, launchScratch_, standIn_;
  // Eager plans (scratch_banks 2): two banks (kBankStride apart, their packet slots after them)
  // that alternate across this
  // runner's eager launches, as the CPU runner's banks in the control block do (schedules/README.md,
  // "Scratch banks"), then the kernels' count of those launches (LaunchArgs::eagerCalls). Peers
  // write a rank's bank without waiting for it to enter the call on the GPU, which saves the
  // entry round of signals; the host rendezvous (stamps) stays.
  DeviceBuffer banks_;
  std::vector<char*> peerBanks_;    // by rank, opened on first use
  std::vector<char*> retired_;      // grown-out buffers: peers may still hold them open
  MemoryHandle scratchHandle_;
  std::map<const CompiledPlan*, Image> images_;
  std::mutex mu_;                   // the calls in flight (a Work's wait may come from another thread)
  std::deque<InFlight> inflight_;
  std::vector<cudaEvent_t> spareEvents_;
  cudaStream_t lastStream_ = nullptr;
  cudaEvent_t lastDone_ = nullptr;  // the last call's event (a call on another stream waits for it)
  bool captured_ = false;           // a call was captured into a CUDA graph
  uint64_t capturedSequence_ = 0;
};

std::unique_ptr<DeviceRunner> makeDeviceRunner(Executor& ex) { return std::make_unique<CudaRunner>(ex); }

CudaRunner::CudaRunner(Executor& ex) : ex_(ex) {
  Communicator::State& s = state();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "GPU memory given, but no CUDA device is visible", s.rank);
  }
  check(cudaGetDevice(&device_), s.rank, "cudaGetDevice");
  // Every kernel of the runner loaded now, at the first call on GPU memory: a kernel loaded lazily
  // cannot be loaded at all while a CUDA graph is captured (an Avg of a new dtype inside a later
  // capture). A load waits for the context's queued work, this one too: only a load before the
  // program's streams hold anything avoids that (forestcc::cudaLoadKernels, the NCCL shim's init).
  loadKernels();
  check(cudaStreamCreateWithFlags(&setup_, cudaStreamNonBlocking), s.rank, "creating the runner's stream");
  check(cudaMalloc(&semaphores_, kSemaphoreWords * sizeof(uint64_t)), s.rank, "allocating device semaphores");
  clear(semaphores_, kSemaphoreWords * sizeof(uint64_t), "clearing device semaphores");
  const uint64_t expectedBytes = uint64_t(s.size) * kMaxPlanChannelsPerPeer * sizeof(uint64_t);
  check(cudaMalloc(&expected_, expectedBytes), s.rank, "allocating device counters");
  clear(expected_, expectedBytes, "clearing device counters");
  // The host memory the kernels read and write: the abort flag, failure records, block offsets.
  constexpr size_t kFailuresAt = 64;
  const size_t offsetsAt = kFailuresAt + (sizeof(DeviceFailure) * (kFailureSlots + 1) + 63) / 64 * 64;
  check(cudaHostAlloc(&hostMapped_, offsetsAt + sizeof(uint64_t) * kOffsetWords * kFailureSlots, cudaHostAllocMapped),
        s.rank, "allocating mapped host memory");
  void* device = nullptr;
  check(cudaHostGetDevicePointer(&device, hostMapped_, 0), s.rank, "mapping host memory");
  mappedBase_ = static_cast<char*>(device);
  hostAbort_ = static_cast<uint32_t*>(hostMapped_);
  *hostAbort_ = 0;
  failures_ = reinterpret_cast<DeviceFailure*>(static_cast<char*>(hostMapped_) + kFailuresAt);
  for (int i = 0; i <= kFailureSlots; ++i) failures_[i] = DeviceFailure{};
  offsets_ = reinterpret_cast<uint64_t*>(static_cast<char*>(hostMapped_) + offsetsAt);
  peerSemaphores_.assign(s.size, nullptr);
  peerBanks_.assign(s.size, nullptr);
  // Peers open the semaphores before their first call here: published before any call record.
  MemoryHandle h;
  h.ownerRank = s.rank;
  h.nodeHash = s.peers[s.rank].nodeHash;
  cuda_ipc::exportMemory(semaphores_, kSemaphoreWords * sizeof(uint64_t), h, "device semaphores");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), s.rank, "cudaGetDeviceProperties");
  static_assert(sizeof(prop.uuid.bytes) == sizeof(DeviceMailbox::deviceUuid), "a CUDA UUID is 16 bytes");
  std::memcpy(uuid_, prop.uuid.bytes, sizeof(uuid_));
  std::memcpy(s.control->deviceMailbox.deviceUuid, uuid_, sizeof(uuid_));
  s.control->deviceMailbox.semaphores = h;
}

void CudaRunner::upload(void* dst, const void* src, size_t bytes, const char* what) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, setup_), state().rank, what);
  check(cudaStreamSynchronize(setup_), state().rank, what);
}

void CudaRunner::clear(void* dst, size_t bytes, const char* what) {
  check(cudaMemsetAsync(dst, 0, bytes, setup_), state().rank, what);
  check(cudaStreamSynchronize(setup_), state().rank, what);
}

char* CudaRunner::banks(bool capturing) {
  static_assert(kDeviceBankStride == kBankStride, "the kernel's banks are laid out as the control block's");
  if (banks_.data) return banks_.data;
  Communicator::State& s = state();
  if (capturing)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(s.rank) + "the first eager call on GPU memory allocates the scratch banks, and device memory "
                                     "cannot be allocated while a CUDA graph is captured: run the call once before "
                                     "capturing it",
                s.rank);
  // Cleared whole: packet slots must start empty (a packet's flag is never zero), and the count.
  const uint64_t bytes = 2 * kBankStride + 2 * sizeof(uint64_t);
  check(cudaMalloc(&banks_.data, bytes), s.rank, "allocating eager scratch banks");
  banks_.size = bytes;
  clear(banks_.data, bytes, "clearing the eager scratch banks");
  MemoryHandle h;
  h.ownerRank = s.rank;
  h.nodeHash = s.peers[s.rank].nodeHash;
  cuda_ipc::exportMemory(banks_.data, banks_.size, h, "eager scratch banks");
  s.control->deviceMailbox.banks = h;  // before this call's record (a release store) publishes it
  return banks_.data;
}

CudaRunner::~CudaRunner() {
  // Kernels of this communicator may still run: they must end before their memory goes.
  try {
    std::lock_guard<std::mutex> g(mu_);
    for (const InFlight& f : inflight_) cudaEventSynchronize(f.done);
  } catch (...) {
  }
  for (auto& [plan, img] : images_) {
    cudaFree(img.ops);
    cudaFree(img.opBegin);
    cudaFree(img.channels);
  }
  for (const InFlight& f : inflight_) cudaEventDestroy(f.done);
  for (cudaEvent_t e : spareEvents_) cudaEventDestroy(e);
  for (char* p : retired_) cudaFree(p);
  cudaFree(scratch_.data);
  cudaFree(launchScratch_.data);
  cudaFree(standIn_.data);
  cudaFree(banks_.data);
  cudaFree(semaphores_);
  cudaFree(expected_);
  cudaFreeHost(hostMapped_);
  if (setup_) cudaStreamDestroy(setup_);
}

char* CudaRunner::grow(DeviceBuffer& b, uint64_t bytes, bool capturing, const char* what) {
  if (b.size >= bytes) return b.data;
  if (capturing)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(state().rank) + "this call needs more " + what +
                    " than earlier ones, and device memory cannot be allocated while a CUDA graph is captured: run "
                    "the call once before capturing it",
                state().rank);
  uint64_t size = std::max<uint64_t>(b.size ? b.size : (1u << 20), 1u << 20);
  while (size < bytes) size *= 2;
  char* grown = nullptr;
  check(cudaMalloc(&grown, size), state().rank, std::string("allocating ") + what);
  // Peers may have the old one open, and calls in flight may use it: it goes with the runner.
  if (b.data) retired_.push_back(b.data);
  b = {grown, size};
  return grown;
}

CudaRunner::Image& CudaRunner::image(const CompiledPlan& p) {
  auto found = images_.find(&p);
  if (found != images_.end()) return found->second;
  Communicator::State& s = state();
  Image img;
  std::vector<plan::Op> ops;
  std::vector<uint32_t> begin{0};
  for (const auto& w : p.workers) {
    ops.insert(ops.end(), w.begin(), w.end());
    begin.push_back(static_cast<uint32_t>(ops.size()));
  }
  img.workers = static_cast<uint32_t>(p.workers.size());
  img.channelCount = static_cast<uint32_t>(p.channels.size());
  for (const ExecChannel& ch : p.channels)
    if (ch.link && std::find(img.peers.begin(), img.peers.end(), ch.peer) == img.peers.end()) img.peers.push_back(ch.peer);
  if (img.peers.size() > static_cast<size_t>(kMaxDevicePeers))
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "plan '" + p.name + "' reaches " +
                                             std::to_string(img.peers.size()) + " peers; on GPU memory a plan may reach " +
                                             std::to_string(kMaxDevicePeers), s.rank);
  check(cudaMalloc(&img.ops, std::max<size_t>(1, ops.size()) * sizeof(plan::Op)), s.rank, "allocating a device plan");
  upload(img.ops, ops.data(), ops.size() * sizeof(plan::Op), "copying a plan");
  check(cudaMalloc(&img.opBegin, begin.size() * sizeof(uint32_t)), s.rank, "allocating a device plan");
  upload(img.opBegin, begin.data(), begin.size() * sizeof(uint32_t), "copying a plan");
  return images_.emplace(&p, img).first->second;
}

// The plan's channels on the device: this rank's semaphore words and the peers' (all opened by now).
void CudaRunner::buildChannels(const CompiledPlan& p, Image& img) {
  if (img.channels || p.channels.empty()) return;
  Communicator::State& s = state();
  const int me = s.localIndex(s.rank);
  std::vector<DeviceChannel> out;
  for (const ExecChannel& ch : p.channels) {
    DeviceChannel d{};
    d.peer = ch.peer;
    if (!ch.link) {  // loopback: channel m signals this rank's word of channel m ^ 1
      d.peerSlot = -1;
      d.inbound = semaphores_ + uint64_t(me) * kMaxPlanChannelsPerPeer + ch.pair;
      d.outbound = semaphores_ + uint64_t(me) * kMaxPlanChannelsPerPeer + (ch.pair ^ 1);
    } else {
      d.peerSlot = static_cast<int32_t>(std::find(img.peers.begin(), img.peers.end(), ch.peer) - img.peers.begin());
      d.inbound = semaphores_ + uint64_t(s.localIndex(ch.peer)) * kMaxPlanChannelsPerPeer + ch.pair;
      d.outbound = peerSemaphores_[ch.peer] + uint64_t(me) * kMaxPlanChannelsPerPeer + ch.pair;
    }
    d.expected = expected_ + uint64_t(ch.peer) * kMaxPlanChannelsPerPeer + ch.pair;
    out.push_back(d);
  }
  check(cudaMalloc(&img.channels, out.size() * sizeof(DeviceChannel)), s.rank, "allocating device channels");
  upload(img.channels, out.data(), out.size() * sizeof(DeviceChannel), "copying device channels");
}

// Every peer of the plan entered this call (its host enqueued it), with this rank's stamp and on
// GPU memory; its buffers of the call opened here.
void CudaRunner::openPeers(Executor::Call& call, const Image& img, LaunchArgs& args, uint64_t* offsets, bool eager) {
  Communicator::State& s = state();
  static const Where kBeforeLaunch{nullptr, 0, 0, nullptr, 0, "before launching the call's GPU kernel"};
  for (size_t slot = 0; slot < img.peers.size(); ++slot) {
    const int peer = img.peers[slot];
    Connection& link = s.link(peer);
    ex_.awaitEntered(call, peer);
    ex_.checkStamp(call, peer, kBeforeLaunch);
    const DeviceMailbox* mailbox = link.peerDeviceMailbox();
    if (!mailbox)
      throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "rank " + std::to_string(peer) + " is on node '" +
                                               s.peers[peer].node + "': collectives on GPU memory reach ranks of "
                                               "this node only in this version", s.rank, peer);
    const DeviceCallRecord& record = mailbox->calls[call.sequence % kDeviceHistory];
    if (__atomic_load_n(&record.sequence, __ATOMIC_ACQUIRE) != call.sequence) {
      const std::string message = rankPrefix(s.rank) + "collective #" + std::to_string(call.sequence) + " (" +
                                  describeCall(call.stamp) + "): rank " + std::to_string(peer) +
                                  " made this call on host memory, this rank on GPU memory: every rank of a call "
                                  "must pass the same kind of memory";
      s.poison(message, ErrorCode::Mismatch, call.sequence);
      throw Error(ErrorCode::Mismatch, message, s.rank, peer);
    }
    DevicePeer& p = args.peers[slot];
    for (int b = 0; b < 3; ++b) {
      const MemoryHandle& h = record.handles[b];
      p.bytes[b] = h.size;
      p.buffers[b] = h.size ? cuda_ipc::openPeerMemory(h) : nullptr;
    }
    if (eager) {
      // The peer made its banks before publishing this call's record, which was read above.
      if (!peerBanks_[peer]) {
        if (mailbox->banks.size < 2 * kBankStride)
          throw Error(ErrorCode::Internal, rankPrefix(s.rank) + "rank " + std::to_string(peer) +
                                               " entered an eager call on GPU memory without scratch banks", s.rank, peer);
        peerBanks_[peer] = static_cast<char*>(cuda_ipc::openPeerMemory(mailbox->banks));
      }
      p.buffers[2] = peerBanks_[peer];  // bank 0; the kernel adds its bank's offset
      p.bytes[2] = kScratchBankBytes;
    }
    for (int b = 0; b < 2 && offsets; ++b) {
      uint64_t* mine = offsets + ((1 + slot) * 2 + b) * (kMaxDeviceVariableRanks + 1);
      std::memcpy(mine, record.blockOffsets[b], sizeof(uint64_t) * (call.plan->nranks + 1));
      p.offsets[b] = mapped(mine);
    }
    if (!peerSemaphores_[peer]) peerSemaphores_[peer] = reinterpret_cast<uint64_t*>(cuda_ipc::openPeerMemory(mailbox->semaphores));
    if (std::memcmp(mailbox->deviceUuid, uuid_, sizeof(uuid_)) != 0) args.gpuScope = false;
  }
}

void CudaRunner::enqueue(const CompiledPlan& p, const CallBuffers& given, int standIn, void* streamHandle) {
  Communicator::State& s = state();
  check(cudaSetDevice(device_), s.rank, "cudaSetDevice");
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), s.rank, "cudaStreamIsCapturing");
  // While a graph is captured, event queries are not allowed (they would end the capture).
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (!capturing) reap(false);
  if (!capturing) {
    // Each call in flight holds a failure record and a slot of block offsets: at most
    // kFailureSlots - 1 in flight, so the slot this call takes is free.
    uint64_t oldest = 0;
    {
      std::lock_guard<std::mutex> guard(mu_);
      if (inflight_.size() + 1 >= static_cast<size_t>(kFailureSlots)) oldest = inflight_.front().sequence;
    }
    if (oldest) reap(true, oldest);
  }
  checkCaptured();
  // From here to the waits before its number, an error is this rank's own: the call is refused.
  OnError refusal([this] { ex_.refuseCall(); });
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + "plan '" + p.name + "' on GPU memory: " + why, s.rank);
  };
  const bool eager = p.scratchBanks == 2;
  if (!given.inCounts.empty() && p.nranks > kMaxDeviceVariableRanks)
    refuse("all_to_all_v on GPU memory supports at most " + std::to_string(kMaxDeviceVariableRanks) + " ranks");
  if (plan::reduces(p.collective) && !deviceReduces(given.dtype))
    refuse(std::string("reductions of ") + name(given.dtype) + " are not supported on GPU memory yet");
  for (const ExecChannel& ch : p.channels)
    if (ch.link && s.nodeOf[ch.peer] != s.nodeOf[s.rank])
      refuse("rank " + std::to_string(ch.peer) + " is on another node; GPU memory reaches ranks of this node only");
  const bool variable = !given.inCounts.empty();
  if (variable && p.scratchChunks) refuse("all_to_all_v needs a plan without scratch (algo 'direct' or 'pairwise')");
  if (variable && capturing)
    refuse("all_to_all_v cannot be captured into a CUDA graph (its block offsets change per call)");

  // A buffer the rank does not pass (gather's output away from the root, say) is this runner's
  // stand-in on the GPU (plans write it before they read it).
  CallBuffers buffers = given;
  if (standIn == 1 || standIn == 2) {
    void*& where = standIn == 1 ? buffers.input : buffers.output;
    where = grow(standIn_, std::max<uint64_t>(1, standIn == 1 ? buffers.inputBytes : buffers.outputBytes), capturing,
                 "stand-in memory");
  }
  Executor::Call call;
  ex_.beginCall(call, p, buffers);
  CallGeometry& g = call.geometry;
  // Slices pipeline a CPU worker's copies through its cache; on the GPU each slice costs a round
  // of signals between processes, so generated plans (which set a minimum slice size) get slices
  // of at least 8 MiB there. A plan file's fixed slice count is kept.
  g.slices = variable ? 1 : Executor::slicesOf(p, g, 8u << 20);
  const uint64_t scratchBytes = (p.scratchChunks + g.k - 1) / g.k * g.count * g.elem;
  g.local[0] = static_cast<char*>(buffers.input);
  g.local[1] = static_cast<char*>(buffers.output);
  g.localBytes[0] = buffers.inputBytes;
  g.localBytes[1] = buffers.outputBytes;
  g.localBytes[2] = scratchBytes;
  if (eager) {
    // Checked before anything is published: every rank has the same count and fails alike.
    if (scratchBytes > kScratchBankBytes)
      refuse("this call needs " + std::to_string(scratchBytes) + " bytes of scratch but an eager bank holds " +
             std::to_string(kScratchBankBytes) + "; use it for smaller messages, or another algorithm");
    g.eager = true;
    g.local[2] = banks(capturing);  // bank 0; the kernel adds its bank's offset
    g.packets = ex_.usesPackets(p, g, scratchBytes, true);
    g.packetBase = kScratchBankBytes;
  } else if (scratchBytes) {
    const char* before = scratch_.data;
    g.local[2] = grow(scratch_, scratchBytes, capturing, "scratch");
    if (g.local[2] != before) {
      scratchHandle_ = MemoryHandle{};
      scratchHandle_.ownerRank = s.rank;
      scratchHandle_.nodeHash = s.peers[s.rank].nodeHash;
      cuda_ipc::exportMemory(scratch_.data, scratch_.size, scratchHandle_, "scratch");
    }
  }
  Image& img = image(p);
  // Thread blocks per worker: one for small calls (no meetings between blocks), more as the
  // bytes grow, at most 64 blocks per rank (ranks share the GPU).
  const uint64_t bytes = std::max(buffers.inputBytes, buffers.outputBytes);
  uint32_t blocks = 1;
  while (blocks < static_cast<uint32_t>(kMaxBlocksPerWorker) && bytes / (blocks * 2) >= (256u << 10) &&
         img.workers * blocks * 2 <= 64)
    blocks *= 2;
  // Its launch scratch is grown before the call is published, like every other allocation: one
  // refused during a capture then fails this rank alone, before peers count on its part.
  const uint64_t region = launchScratchBytes(img.workers, blocks, img.channelCount);
  if (img.workers) {
    const char* before = launchScratch_.data;
    grow(launchScratch_, region, capturing, "launch scratch");
    if (before != launchScratch_.data) dirty_ = launchScratch_.size;  // fresh memory
  }

  refusal.dismiss();
  // Before this call takes its number: a wait that fails leaves the communicator as it was.
  const uint64_t next = ex_.sequence_ + 1;
  ex_.awaitStampWindow(next);
  // The record this call overwrites was read by every peer (they entered the call after it).
  for (int peer : img.peers) {
    if (next < kDeviceHistory) break;
    Connection& link = s.link(peer);
    const uint64_t floor = next - kDeviceHistory + 1;
    auto ready = [&] { return link.peerSequence() >= floor; };
    const WaitOutcome outcome = waitUntil(ready, s.waitPolicy(peer, s.timeout));
    if (outcome != WaitOutcome::Ready)
      s.raiseWaitFailure(outcome, peer,
                         "collective #" + std::to_string(next) + ": waiting for rank " + std::to_string(peer) +
                             " to enter collective #" + std::to_string(floor),
                         s.timeout);
  }
  ex_.numberCall(call);

  // Publish: the call's buffers as IPC handles, then its stamp and number (release stores).
  DeviceCallRecord& record = s.control->deviceMailbox.calls[call.sequence % kDeviceHistory];
  __atomic_store_n(&record.sequence, 0, __ATOMIC_RELAXED);
  for (int b = 0; b < 2; ++b) {
    MemoryHandle h;
    h.ownerRank = s.rank;
    h.nodeHash = s.peers[s.rank].nodeHash;
    if (g.localBytes[b]) cuda_ipc::exportMemory(g.local[b], g.localBytes[b], h, b == 0 ? "input" : "output");
    record.handles[b] = h;
  }
  // An eager call's scratch is its bank, opened through the mailbox (openPeers), not per call.
  record.handles[2] = scratchBytes && !eager ? scratchHandle_ : MemoryHandle{};
  record.handles[2].size = eager ? 0 : scratchBytes;
  uint64_t* offsets = nullptr;  // this call's slot of block offsets (all_to_all_v)
  if (variable) {
    offsets = offsets_ + (call.sequence % kFailureSlots) * kOffsetWords;
    const std::vector<uint64_t>* counts[2] = {&buffers.inCounts, &buffers.outCounts};
    for (int b = 0; b < 2; ++b) {
      uint64_t* mine = offsets + b * (kMaxDeviceVariableRanks + 1);
      mine[0] = 0;
      for (int r = 0; r < p.nranks; ++r) mine[r + 1] = mine[r] + (*counts[b])[r];
      std::memcpy(record.blockOffsets[b], mine, sizeof(uint64_t) * (p.nranks + 1));
      g.localOffsets[b] = mapped(mine);
    }
  }
  __atomic_store_n(&record.sequence, call.sequence, __ATOMIC_RELEASE);
  CallMailbox& mb = s.mailbox();
  writeStamp(mb.byCall[call.sequence % kStampHistory], call.stamp);
  __atomic_store_n(&mb.sequence, call.sequence, __ATOMIC_RELEASE);
  ex_.ringPeerDoorbells();  // a peer asleep in awaitEntered wakes now, not at the end of its sleep
  s.published();

  LaunchArgs args{};
  args.gpuScope = true;  // until a peer on another GPU is found (openPeers)
  try {
    openPeers(call, img, args, offsets, eager);
    buildChannels(p, img);
  } catch (const Error& e) {
    if (!s.poisoned()) s.poison(e.what(), e.code() == ErrorCode::Mismatch ? ErrorCode::Mismatch : ErrorCode::Aborted,
                                call.sequence);
    throw;
  }
  if (img.workers == 0) return;  // nothing for this rank to do in this plan

  args.ops = img.ops;
  args.opBegin = img.opBegin;
  args.channels = img.channels;
  args.channelCount = img.channelCount;
  args.workers = img.workers;
  args.blocksPerWorker = blocks;
  args.geometry = g;
  args.dtype = buffers.dtype;
  args.op = buffers.op;
  args.timeoutNs = static_cast<uint64_t>(s.timeout * 1e9);
  // Every rank of an eager plan has a worker (it waits on every peer: executor.cpp), so every
  // rank's count of eager launches moves on alike.
  args.eagerCalls = eager ? reinterpret_cast<uint64_t*>(banks_.data + 2 * kBankStride) : nullptr;
  args.launchScratch = reinterpret_cast<uint32_t*>(launchScratch_.data);
  args.hostAbort = mapped(hostAbort_);
  // A launch of one block per worker zeroes what it used, so the next one needs no memset (~5 us
  // on the GPU per call); other launches leave their region set, and the next launch clears all
  // of it (dirty_), not only its own region. Around graphs the whole scratch is cleared every
  // time: a replay runs whenever its owner says, so what the last launch left is unknown here. A
  // failed launch leaves its words set, so later launches of the communicator abort (it is
  // poisoned by then).
  const uint64_t clearBytes = capturing || captured_ ? launchScratch_.size : dirty_ ? std::max(dirty_, region) : 0;
  args.leaveScratchZero = blocks == 1 && !capturing;

  std::lock_guard<std::mutex> guard(mu_);
  const int slot = capturing ? kFailureSlots : static_cast<int>(call.sequence % kFailureSlots);
  failures_[slot].flag = 0;
  args.failure = mapped(failures_ + slot);
  // Calls of one communicator run one after another, also when they come on different streams.
  if (!capturing && lastDone_ && stream != lastStream_)
    check(cudaStreamWaitEvent(stream, lastDone_, 0), s.rank, "ordering after the previous call");
  dirty_ = launchScratch_.size;  // until the launch is enqueued
  if (!launchPlan(args, clearBytes, stream)) check(cudaGetLastError(), s.rank, "launching the plan's kernel");
  dirty_ = args.leaveScratchZero ? 0 : region;
  if (buffers.op == ReduceOp::Avg && plan::reduces(p.collective) &&
      (p.collective != plan::Collective::Reduce || s.rank == p.root) &&
      !launchDivide(buffers.output, g.count, buffers.dtype, static_cast<uint32_t>(p.nranks), stream))
    check(cudaGetLastError(), s.rank, "launching the average's division");
  lastStream_ = stream;
  if (capturing) {
    captured_ = true;
    capturedSequence_ = call.sequence;
    return;
  }
  cudaEvent_t done;
  if (!spareEvents_.empty()) {
    done = spareEvents_.back();
    spareEvents_.pop_back();
  } else {
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), s.rank, "cudaEventCreate");
  }
  check(cudaEventRecord(done, stream), s.rank, "cudaEventRecord");
  inflight_.push_back({done, call.sequence, &p, call.stamp, slot});
  lastDone_ = done;
}

// Waits until the GPU finished `f`, watching the peers and the poison meanwhile: a dead peer or a
// poisoned communicator sets the abort flag, so the kernels stop at their next poll.
void CudaRunner::waitFor(const InFlight& f) {
  Communicator::State& s = state();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  // The kernels' own waits give up after the timeout; this bounds a kernel that cannot poll.
  const auto deadline = start + std::chrono::duration<double>(2 * s.timeout + 30);
  auto nextCheck = start + std::chrono::milliseconds(50);
  long sleepUs = 5;
  while (true) {
    const cudaError_t e = cudaEventQuery(f.done);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check(e, s.rank, "collective #" + std::to_string(f.sequence) + " on the GPU");
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
    sleepUs = std::min<long>(sleepUs * 2, 1000);
    const auto now = clock::now();
    if (now < nextCheck) continue;
    nextCheck = now + std::chrono::milliseconds(50);
    for (int r = 0; r < s.size && !*hostAbort_; ++r)
      if (r != s.rank && s.nodeOf[r] == s.nodeOf[s.rank] && !processAlive(s.peers[r].pid)) {
        s.poison(rankPrefix(s.rank) + "collective #" + std::to_string(f.sequence) + " (" + describeCall(f.stamp) +
                     ") on the GPU: rank " + std::to_string(r) + " (pid " + std::to_string(s.peers[r].pid) + ") died",
                 ErrorCode::Aborted, f.sequence);
        __atomic_store_n(hostAbort_, 1u, __ATOMIC_RELEASE);
      }
    if (s.poisoned()) __atomic_store_n(hostAbort_, 1u, __ATOMIC_RELEASE);
    if (now >= deadline) {
      __atomic_store_n(hostAbort_, 1u, __ATOMIC_RELEASE);
      const std::string message = rankPrefix(s.rank) + "collective #" + std::to_string(f.sequence) + " (" +
                                  describeCall(f.stamp) + "): the GPU did not finish it within " +
                                  std::to_string(static_cast<int>(2 * s.timeout + 30)) + " s";
      s.poison(message);
      throw Error(ErrorCode::Timeout, message, s.rank);
    }
    checkInterrupt();
  }
}

void CudaRunner::raiseRecorded(const InFlight& f) {
  const DeviceFailure& rec = failures_[f.slot];
  if (!__atomic_load_n(&rec.flag, __ATOMIC_ACQUIRE)) return;
  Communicator::State& s = state();
  Executor::Call call;
  call.plan = f.plan;
  call.sequence = f.sequence;
  call.stamp = f.stamp;
  call.geometry.elem = static_cast<uint32_t>(elementSize(static_cast<DataType>(f.stamp.dtype)));
  const std::string name = "collective #" + std::to_string(f.sequence) + " (" + describeCall(f.stamp) + ")";
  // Aborted by the host: the poison (a dead peer, another rank's report) says why.
  if (rec.failure.kind == FailureKind::Aborted && s.poisoned()) s.raisePoisoned(name, -1);
  try {
    ex_.raiseFailure(call, rec.worker, rec.failure, nullptr);
  } catch (const Error& e) {
    if (!s.poisoned()) s.poison(e.what(), e.code() == ErrorCode::Mismatch ? ErrorCode::Mismatch : ErrorCode::Aborted,
                                f.sequence);
    throw;
  }
}

void CudaRunner::checkCaptured() {
  if (!captured_) return;
  if (!__atomic_load_n(&failures_[kFailureSlots].flag, __ATOMIC_ACQUIRE)) return;
  Communicator::State& s = state();
  const DeviceFailure& rec = failures_[kFailureSlots];
  const std::string message = rankPrefix(s.rank) + "a collective replayed from a CUDA graph (captured as collective #" +
                              std::to_string(capturedSequence_) + ") failed on the GPU (" +
                              (rec.failure.kind == FailureKind::Timeout
                                   ? "timed out waiting for rank " + std::to_string(rec.failure.peer)
                                   : std::string("aborted")) +
                              ", worker " + std::to_string(rec.worker) + " step " + std::to_string(rec.failure.step) + ")";
  if (!s.poisoned()) s.poison(message);
  throw Error(rec.failure.kind == FailureKind::Timeout ? ErrorCode::Timeout : ErrorCode::Aborted, message, s.rank,
              rec.failure.peer);
}

void CudaRunner::reap(bool block, uint64_t upTo) {
  std::lock_guard<std::mutex> guard(mu_);
  while (!inflight_.empty() && inflight_.front().sequence <= upTo) {
    InFlight f = inflight_.front();
    if (block) {
      waitFor(f);
    } else {
      const cudaError_t e = cudaEventQuery(f.done);
      if (e == cudaErrorNotReady) break;
      check(e, state().rank, "collective #" + std::to_string(f.sequence) + " on the GPU");
    }
    inflight_.pop_front();
    spareEvents_.push_back(f.done);
    if (lastDone_ == f.done) lastDone_ = nullptr;
    raiseRecorded(f);
  }
}

void CudaRunner::synchronize() {
  check(cudaSetDevice(device_), state().rank, "cudaSetDevice");
  reap(true);
  if (captured_) check(cudaDeviceSynchronize(), state().rank, "waiting for replayed graphs");
  checkCaptured();
}

std::function<bool(bool)> CudaRunner::completion() {
  const uint64_t sequence = ex_.sequence_;
  return [this, sequence](bool block) {
    check(cudaSetDevice(device_), state().rank, "cudaSetDevice");
    if (!block) {
      std::lock_guard<std::mutex> guard(mu_);
      for (const InFlight& f : inflight_)
        if (f.sequence == sequence && cudaEventQuery(f.done) == cudaErrorNotReady) return false;
    }
    reap(true, sequence);
    return true;
  };
}

}  // namespace forestcc::executor
