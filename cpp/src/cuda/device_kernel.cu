// The plan interpreter (executor/interpreter.hpp) as a CUDA kernel: each plan worker is a group
// of thread blocks that split every copy and reduce among them; thread 0 of each block polls the
// semaphores. Peers' buffers are mapped (CUDA IPC), so every put and get is a load or a store.
// The blocks of a worker meet (a barrier on a counter in device memory) after each piece of data
// work, so the next step may read what any of them wrote, and a signal follows only once all of
// it is done. Every spin has a deadline (%globaltimer) and watches the abort flags: a failure becomes
// a record the host reads and reports with the rank, the peer and the step (device_runner.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cuda/device_launch.hpp"

namespace forestcc::executor {

namespace {

__device__ __forceinline__ uint64_t nowNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Semaphore words: at GPU scope when every peer runs on this GPU (processes sharing it), else at
// system scope (peers on other GPUs).
__device__ __forceinline__ uint64_t loadAcquire(const uint64_t* p, bool gpuScope) {
  uint64_t v;
  if (gpuScope) asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void releaseIncrement(uint64_t* p, bool gpuScope) {
  if (gpuScope) asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(p) : "memory");
  else asm volatile("red.release.sys.global.add.u64 [%0], 1;" ::"l"(p) : "memory");
}

__device__ __forceinline__ void fence(bool gpuScope) {
  if (gpuScope) __threadfence();
  else __threadfence_system();
}

__device__ __forceinline__ uint32_t loadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return b < a ? b : a;
    case ReduceOp::Max: return a < b ? b : a;
    default: return a + b;  // Sum; Avg divides at the end (divideKernel)
  }
}

// 16-bit floats are reduced in float, as on the CPU (executor/reduce_kernels.cpp).
template <class T> struct Wide { using type = T; };
template <> struct Wide<__half> { using type = float; };
template <> struct Wide<__nv_bfloat16> { using type = float; };
template <class T> __device__ __forceinline__ typename Wide<T>::type widen(T v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T narrow(typename Wide<T>::type v) { return T(v); }
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 8-bit floats: bytes, widened to float through half and narrowed without saturation, as on the
// CPU (core/fp8.hpp, ml_dtypes' rules): past the largest value e4m3 becomes NaN, e5m2 infinity.
template <__nv_fp8_interpretation_t Kind>
struct Fp8 {
  __nv_fp8_storage_t bits;
};
using Fp8E4M3 = Fp8<__NV_E4M3>;
using Fp8E5M2 = Fp8<__NV_E5M2>;
template <__nv_fp8_interpretation_t K> struct Wide<Fp8<K>> { using type = float; };
template <__nv_fp8_interpretation_t K>
__device__ __forceinline__ float widen(Fp8<K> v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, K)));
}
template <> __device__ __forceinline__ Fp8E4M3 narrow<Fp8E4M3>(float v) {
  return {__nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3)};
}
template <> __device__ __forceinline__ Fp8E5M2 narrow<Fp8E5M2>(float v) {
  return {__nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2)};
}

// Loads of data other ranks write bypass L1 (ld.global.cg): a line cached for an earlier op of
// the same kernel (a neighbouring chunk) would otherwise still hold bytes from before the
// peer's signal.
template <class T>
__device__ __forceinline__ T loadFresh(const T* p) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16, "");
  T v;
  if constexpr (sizeof(T) == 1) {
    const unsigned char b = __ldcg(reinterpret_cast<const unsigned char*>(p));
    __builtin_memcpy(&v, &b, 1);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short b = __ldcg(reinterpret_cast<const unsigned short*>(p));
    __builtin_memcpy(&v, &b, 2);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int b = __ldcg(reinterpret_cast<const unsigned int*>(p));
    __builtin_memcpy(&v, &b, 4);
  } else if constexpr (sizeof(T) == 8) {
    const unsigned long long b = __ldcg(reinterpret_cast<const unsigned long long*>(p));
    __builtin_memcpy(&v, &b, 8);
  } else {
    const uint4 b = __ldcg(reinterpret_cast<const uint4*>(p));
    __builtin_memcpy(&v, &b, 16);
  }
  return v;
}

// Elements [lo, hi): 16 bytes per thread and load where every pointer allows it, one element at
// a time for the rest.
template <class T>
__device__ void reduceRange(char* dst, const char* const* srcs, int n, uint64_t lo, uint64_t hi, ReduceOp op) {
  using W = typename Wide<T>::type;
  constexpr int V = 16 / sizeof(T);
  uint64_t bits = reinterpret_cast<uint64_t>(dst + lo * sizeof(T));
  for (int s = 0; s < n; ++s) bits |= reinterpret_cast<uint64_t>(srcs[s] + lo * sizeof(T));
  if ((bits & 15) == 0) {
    const uint64_t vectors = (hi - lo) / V;
    for (uint64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
      const uint64_t at = (lo + v * V) * sizeof(T);
      uint4 in = loadFresh(reinterpret_cast<const uint4*>(srcs[0] + at));
      W acc[V];
      for (int j = 0; j < V; ++j) acc[j] = widen(reinterpret_cast<const T*>(&in)[j]);
      for (int s = 1; s < n; ++s) {
        in = loadFresh(reinterpret_cast<const uint4*>(srcs[s] + at));
        for (int j = 0; j < V; ++j) acc[j] = combine(acc[j], widen(reinterpret_cast<const T*>(&in)[j]), op);
      }
      uint4 out;
      for (int j = 0; j < V; ++j) reinterpret_cast<T*>(&out)[j] = narrow<T>(acc[j]);
      *reinterpret_cast<uint4*>(dst + at) = out;
    }
    lo += vectors * V;
  }
  T* out = reinterpret_cast<T*>(dst);
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    auto acc = widen(loadFresh(reinterpret_cast<const T*>(srcs[0]) + i));
    for (int s = 1; s < n; ++s) acc = combine(acc, widen(loadFresh(reinterpret_cast<const T*>(srcs[s]) + i)), op);
    out[i] = narrow<T>(acc);
  }
}

// Copies [0, bytes) with the widest loads both pointers' alignment allows, four in flight per
// thread.
template <class W>
__device__ __forceinline__ void copyWords(char* __restrict__ dst, const char* __restrict__ src, uint64_t bytes) {
  const uint64_t n = bytes / sizeof(W);
  W* d = reinterpret_cast<W*>(dst);
  const W* s = reinterpret_cast<const W*>(src);
  const uint64_t stride = blockDim.x;
  uint64_t i = threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const W a = loadFresh(s + i), b = loadFresh(s + i + stride), c = loadFresh(s + i + 2 * stride),
            e = loadFresh(s + i + 3 * stride);
    d[i] = a, d[i + stride] = b, d[i + 2 * stride] = c, d[i + 3 * stride] = e;
  }
  for (; i < n; i += stride) d[i] = loadFresh(s + i);
  for (uint64_t j = n * sizeof(W) + threadIdx.x; j < bytes; j += stride) dst[j] = loadFresh(src + j);
}

__device__ void copyBytes(char* dst, const char* src, uint64_t bytes) {
  const uint64_t both = reinterpret_cast<uint64_t>(dst) | reinterpret_cast<uint64_t>(src);
  if ((both & 15) == 0) copyWords<uint4>(dst, src, bytes);
  else if ((both & 7) == 0) copyWords<uint64_t>(dst, src, bytes);
  else if ((both & 3) == 0) copyWords<uint32_t>(dst, src, bytes);
  else copyWords<uint8_t>(dst, src, bytes);
}

// Eager launches: where this launch's scratch bank starts in each rank's banks, and its packet
// flag (eagerBank), in shared memory rather than registers of every thread (only eager plans'
// scratch and packets read them).
__shared__ uint64_t eagerBankOffset;
__shared__ uint32_t eagerFlag;

// A packet (packets.hpp) as one 16-byte access of two 8-byte words, each single-copy atomic.
__device__ __forceinline__ void storePacket(char* p, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
}
__device__ __forceinline__ void loadPacket(const char* p, uint64_t& w0, uint64_t& w1) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(p) : "memory");
}
// Bytes [8k, 8k + 8) of src (the tail of the last packet zero), read past L1.
__device__ __forceinline__ uint64_t sourceData(const char* src, uint64_t k, uint64_t bytes) {
  const uint64_t at = k * kPacketDataBytes;
  if (at + kPacketDataBytes <= bytes && (reinterpret_cast<uint64_t>(src + at) & 7) == 0)
    return loadFresh(reinterpret_cast<const uint64_t*>(src + at));
  uint64_t v = 0;
  for (uint64_t i = 0; i < kPacketDataBytes && at + i < bytes; ++i)
    v |= uint64_t(loadFresh(reinterpret_cast<const unsigned char*>(src + at + i))) << (8 * i);
  return v;
}

struct DeviceBackend {
  const LaunchArgs& a;
  uint32_t worker, member, members;
  uint32_t* barrier;     // this worker's counter
  uint32_t* abortFlag;   // the launch's
  uint32_t* waits;       // this block's waits done per channel
  uint32_t episodes = 0;
  uint32_t waitSlot = 0;  // which of wait()'s two outcome slots the block's next wait uses
  bool aborted = false;  // a meeting of the worker's blocks was abandoned

  __device__ bool abortRequested() const {
    return *reinterpret_cast<volatile uint32_t*>(abortFlag) != 0 || *a.hostAbort != 0;
  }

  __device__ int peerOf(int channel) const { return a.channels[channel].peer; }

  __device__ bool remote(int channel, plan::Buffer b, RemoteBuffer& out, Failure&) {
    const DeviceChannel& ch = a.channels[channel];
    const int i = static_cast<int>(b);
    if (ch.peerSlot < 0) {
      out = {a.geometry.local[i], a.geometry.localBytes[i],
             b == plan::Buffer::Scratch ? nullptr : a.geometry.localOffsets[i], 0};
    } else {
      const DevicePeer& p = a.peers[ch.peerSlot];
      out = {p.buffers[i], p.bytes[i], b == plan::Buffer::Scratch ? nullptr : p.offsets[i], 0};
    }
    return true;
  }
  __device__ bool unsupported(Failure& f) {
    f.kind = FailureKind::Unsupported;
    return false;
  }
  // A reduction and its puts run op by op: each is already spread over the worker's blocks.
  static constexpr bool kTilesReductions = false;
  // An eager plan's scratch: the runner gave each rank's bank 0 as its scratch (this rank's own
  // for a loopback channel); this launch's bank is at bankOffset from it. Unmapped memory never
  // reaches the GPU runner (refused on the host).
  __device__ bool bank(int channel, RemoteBuffer& out, Failure& f) {
    if (!remote(channel, plan::Buffer::Scratch, out, f)) return false;
    out.mapped += eagerBankOffset;
    return true;
  }
  __device__ char* ownBank(char* scratch) const { return scratch + eagerBankOffset; }

  // Packets into a peer's bank: the worker's threads each write their share, one 16-byte store
  // per packet, and no signal follows (the flag in every word is what the peer polls). The
  // threads meet after it: a later op may overwrite what this one read. Not inlined (nor is
  // awaitPackets): inlined into runPlan they cost every plan's kernel registers (spills).
  __device__ __noinline__ bool putPackets(int, const RemoteBuffer& b, uint64_t offset, const char* src, uint64_t bytes, Failure&) {
    const uint64_t n = packetCount(bytes);
    uint64_t lo, hi;
    share(n, 1, lo, hi);
    char* out = b.mapped + offset;
    const uint32_t flag = eagerFlag;
    for (uint64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
      const uint64_t v = sourceData(src, k, bytes);
      storePacket(out + kPacketBytes * k, packetWord(static_cast<uint32_t>(v), flag),
                  packetWord(static_cast<uint32_t>(v >> 32), flag));
    }
    settle();
    return true;
  }

  // Each thread polls its share of the packets and unpacks each as it arrives; every poll loop
  // has the wait's deadline and watches the abort flags, and one thread's failure stops the
  // block's others at their next check.
  __device__ __noinline__ bool awaitPackets(int channel, const char* packets, char* dst, uint64_t bytes, Failure& f) {
    __shared__ int outcome;  // 1 arrived, 0 deadline, 2 aborted
    volatile int& state = outcome;
    if (threadIdx.x == 0) state = 1;
    __syncthreads();
    const uint64_t n = packetCount(bytes);
    uint64_t lo, hi;
    share(n, 1, lo, hi);
    const uint32_t flag = eagerFlag;
    const uint64_t start = nowNs();
    for (uint64_t k = lo + threadIdx.x; k < hi && state == 1; k += blockDim.x) {
      uint64_t w0, w1;
      for (uint32_t spins = 0;;) {
        loadPacket(packets + kPacketBytes * k, w0, w1);
        if (packetArrived(w0, w1, flag)) break;
        if (++spins % 64 == 0) {
          if (state != 1) break;
          if (abortRequested()) {
            state = 2;
            break;
          }
          if (nowNs() - start > a.timeoutNs) {
            state = 0;
            break;
          }
        }
      }
      if (state != 1) break;
      unpackData(reinterpret_cast<unsigned char*>(dst), k, bytes, (w1 << 32) | static_cast<uint32_t>(w0));
    }
    settle();
    if (state == 1) return true;
    f.kind = state == 0 ? FailureKind::Timeout : FailureKind::Aborted;
    f.peer = a.channels[channel].peer;
    return false;
  }
  __device__ bool write(int, const RemoteBuffer&, uint64_t, const char*, uint64_t, Failure& f) { return unsupported(f); }
  __device__ bool read(int, const RemoteBuffer&, uint64_t, char*, uint64_t, Failure& f) { return unsupported(f); }
  __device__ bool readReduce(int, const RemoteBuffer&, uint64_t, char*, const char* const*, int, uint64_t, Failure& f) {
    return unsupported(f);
  }

  // This block's share of [0, n) units, cut at multiples of `align` units.
  __device__ void share(uint64_t n, uint64_t align, uint64_t& lo, uint64_t& hi) const {
    const uint64_t pieces = (n + align - 1) / align;
    lo = min(n, pieces * member / members * align);
    hi = min(n, pieces * (member + 1) / members * align);
  }

  __device__ void copy(char* dst, const char* src, uint64_t bytes) {
    uint64_t lo, hi;
    share(bytes, 16, lo, hi);
    if (hi > lo) copyBytes(dst + lo, src + lo, hi - lo);
    settle();
  }
  // Overlapping ranges (a copy within one buffer): one thread, in the safe direction.
  __device__ void move(char* dst, const char* src, uint64_t bytes) {
    if (member == 0 && threadIdx.x == 0) {
      if (dst < src)
        for (uint64_t i = 0; i < bytes; ++i) dst[i] = src[i];
      else
        for (uint64_t i = bytes; i-- > 0;) dst[i] = src[i];
    }
    settle();
  }

  __device__ void reduce(char* dst, const char* const* srcs, int n, uint64_t elements) {
    uint64_t lo, hi;
    share(elements, 64, lo, hi);
    switch (a.dtype) {
      case DataType::Int8: reduceRange<int8_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Uint8: reduceRange<uint8_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Int32: reduceRange<int32_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Uint32: reduceRange<uint32_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Int64: reduceRange<int64_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Uint64: reduceRange<uint64_t>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Float16: reduceRange<__half>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::BFloat16: reduceRange<__nv_bfloat16>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Float32: reduceRange<float>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Float64: reduceRange<double>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Float8E4M3: reduceRange<Fp8E4M3>(dst, srcs, n, lo, hi, a.op); break;
      case DataType::Float8E5M2: reduceRange<Fp8E5M2>(dst, srcs, n, lo, hi, a.op); break;
      default: break;  // refused on the host (device_runner.cu, deviceReduces)
    }
    settle();
  }

  // After every piece of data work: the next step may read what any thread of the worker wrote,
  // split among threads and blocks another way (a reduce_put puts what its reduce wrote), so
  // the block's threads meet, and the worker's blocks when it has several.
  __device__ void settle() {
    if (members > 1) {
      if (!meet()) aborted = true;
    } else {
      __syncthreads();
    }
  }

  // The worker's blocks meet; false: abandoned (a failure elsewhere, or the deadline).
  __device__ bool meet() {
    __shared__ int ok;
    fence(a.gpuScope);  // this thread's stores before the block's arrival (and a signal)
    __syncthreads();
    const uint32_t target = ++episodes * members;
    if (threadIdx.x == 0) {
      ok = 1;
      atomicAdd(barrier, 1u);
      const uint64_t start = nowNs();
      for (uint32_t spins = 0; loadAcquire(barrier) < target;)
        if (++spins % 64 == 0 && (abortRequested() || nowNs() - start > a.timeoutNs)) {
          ok = 0;
          break;
        }
    }
    __syncthreads();
    if (ok && threadIdx.x != 0) loadAcquire(barrier);  // the other blocks' stores, for each thread
    return ok;
  }

  __device__ bool afterOp(Failure& f) {
    if (!aborted) return true;
    f.kind = FailureKind::Aborted;
    return false;
  }

  // The block's threads meet, then one thread increments the flag with release semantics: the
  // barrier orders every thread's stores (and, through settle(), every block's) before the
  // release, which makes them visible to whoever acquires the flag (PTX causality order is
  // transitive through the barrier). One fence per signal, not one per thread: a system-scope
  // fence by every thread of the block cost ~2.5 us per signal on an H100.
  __device__ void signal(int channel) {
    if (aborted) return;  // the blocks did not all finish their data: no flag
    __syncthreads();
    if (member == 0 && threadIdx.x == 0) releaseIncrement(a.channels[channel].outbound, a.gpuScope);
  }
  __device__ void flush(int) { fence(a.gpuScope); }

  __device__ bool wait(int channel, Failure& f) {
    const DeviceChannel& ch = a.channels[channel];
    // 1 ready, 0 deadline, 2 aborted. Thread 0 writes a wait's outcome before the wait's barrier,
    // while a slow warp may still be reading the previous wait's: consecutive waits use the two
    // slots in turn (every thread of the block makes the same waits), and by the wait after next
    // every thread has passed the barrier that follows its read.
    __shared__ int outcomes[2];
    waitSlot ^= 1;
    int& outcome = outcomes[waitSlot];
    if (threadIdx.x == 0) {
      const uint64_t want = *ch.expected + ++waits[channel];
      outcome = 1;
      if (loadAcquire(ch.inbound, a.gpuScope) < want) {
        const uint64_t start = nowNs();
        for (uint32_t spins = 0; loadAcquire(ch.inbound, a.gpuScope) < want;)
          if (++spins % 64 == 0) {
            if (abortRequested()) {
              outcome = 2;
              break;
            }
            if (nowNs() - start > a.timeoutNs) {
              outcome = 0;
              break;
            }
          }
      }
    }
    __syncthreads();
    // Each thread acquires the flag itself before it reads what the signal published.
    if (outcome == 1 && threadIdx.x != 0) loadAcquire(ch.inbound, a.gpuScope);
    if (outcome == 1) return true;
    f.kind = outcome == 0 ? FailureKind::Timeout : FailureKind::Aborted;
    f.peer = ch.peer;
    return false;
  }
};

// Eager launches: every block learns the bank from the runner's count of eager launches before
// it does anything, and the last block to finish moves the count on. Every block has read the
// count by then (each read precedes its own arrival, fenced), so no block of this launch can see
// the next launch's bank; the next launch (stream order, or the next node of a graph) sees the
// new count.
__device__ void eagerBank(const LaunchArgs& a) {
  if (threadIdx.x == 0) {
    const uint64_t count = *reinterpret_cast<volatile uint64_t*>(a.eagerCalls);
    eagerBankOffset = (count & 1) * kDeviceBankStride;
    eagerFlag = packetFlag(count);
  }
  __syncthreads();
}
__device__ void eagerLaunchEnds(const LaunchArgs& a) {
  __syncthreads();  // every thread of the block is past its use of the bank's number
  if (threadIdx.x != 0) return;
  unsigned long long* finished = reinterpret_cast<unsigned long long*>(a.eagerCalls + 1);
  __threadfence();
  if (atomicAdd(finished, 1ull) + 1 != gridDim.x) return;
  __threadfence();
  *finished = 0;
  *a.eagerCalls += 1;
}

// __grid_constant__: the backend refers to the parameters in place; without it every thread
// copied all of them (~2.6 KB) to its stack at the start of each launch.
// At least two blocks per SM (64 registers a thread, what it uses now): a worker's blocks and the
// ranks sharing the GPU spin on each other, so every block of every rank's kernel must be resident
// at once: 4 ranks x 64 blocks = 256 of the 264 an H100 SXM or H200 (132 SMs) holds at 2 per SM; at
// 1 per SM (more registers) large calls would wait on blocks that never start. Smaller GPUs hold
// fewer (H100 PCIe, 114 SMs: 228; A100, 108: 216), and nothing checks the fit before a launch.
__global__ void __launch_bounds__(kDeviceThreads, 2) runPlan(const __grid_constant__ LaunchArgs a) {
  const uint32_t worker = blockIdx.x / a.blocksPerWorker, member = blockIdx.x % a.blocksPerWorker;
  uint32_t* abortFlag = a.launchScratch + a.workers;
  uint32_t* waits = abortFlag + 1 + uint64_t(blockIdx.x) * a.channelCount;
  if (a.eagerCalls) eagerBank(a);
  DeviceBackend backend{a, worker, member, a.blocksPerWorker, a.launchScratch + worker, abortFlag, waits};
  Interpreter<DeviceBackend> interpreter(a.geometry, backend);
  const uint32_t begin = a.opBegin[worker];
  Failure f = interpreter.run(a.ops + begin, a.opBegin[worker + 1] - begin);
  if (a.eagerCalls) eagerLaunchEnds(a);
  // Every block of the worker is done before the semaphores' expected counts move on.
  if (f.kind == FailureKind::None && a.blocksPerWorker > 1 && !backend.meet()) f.kind = FailureKind::Aborted;
  if (f.kind != FailureKind::None) {
    if (threadIdx.x == 0) {
      // The first failure is the cause; those it aborts find the flag taken.
      if (atomicCAS(&a.failure->flag, 0u, 1u) == 0u) {
        a.failure->worker = static_cast<int32_t>(worker);
        a.failure->failure = f;
      }
      __threadfence_system();
      atomicExch(abortFlag, 1u);
    }
    return;
  }
  if (member == 0)
    for (uint32_t c = threadIdx.x; c < a.channelCount; c += blockDim.x)
      if (waits[c]) *a.channels[c].expected += waits[c];
  if (a.leaveScratchZero) {  // one block per worker: no other block reads this block's words
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < a.channelCount; c += blockDim.x) waits[c] = 0;
  }
}

template <class T>
__global__ void divideKernel(T* data, uint64_t n, uint32_t by) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    data[i] = narrow<T>(widen(loadFresh(data + i)) / static_cast<typename Wide<T>::type>(by));
}

template <class... T>
bool loadDivideKernels() {
  cudaFuncAttributes attributes;
  return ((cudaFuncGetAttributes(&attributes, divideKernel<T>) == cudaSuccess) & ...);
}

}  // namespace

// cudaFuncGetAttributes loads a kernel that lazy loading (CUDA_MODULE_LOADING=LAZY, the default)
// has not loaded yet.
bool loadKernels() {
  cudaFuncAttributes attributes;
  const bool ok = cudaFuncGetAttributes(&attributes, runPlan) == cudaSuccess &&
                  loadDivideKernels<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t, __half, __nv_bfloat16,
                                    float, double, Fp8E4M3, Fp8E5M2>();
  if (!ok) cudaGetLastError();
  return ok;
}

bool launchPlan(const LaunchArgs& args, uint64_t clearBytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (clearBytes && cudaMemsetAsync(args.launchScratch, 0, clearBytes, s) != cudaSuccess) return false;
  runPlan<<<args.workers * args.blocksPerWorker, kDeviceThreads, 0, s>>>(args);
  return cudaPeekAtLastError() == cudaSuccess;
}

// Avg: the reduced elements divided by the rank count, after the plan (on the same stream).
bool launchDivide(void* data, uint64_t n, DataType dtype, uint32_t by, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (!n) return true;
  const unsigned blocks = static_cast<unsigned>(n / 1024 + 1 < 1024 ? n / 1024 + 1 : 1024);
  switch (dtype) {
    case DataType::Int8: divideKernel<<<blocks, 256, 0, s>>>(static_cast<int8_t*>(data), n, by); break;
    case DataType::Uint8: divideKernel<<<blocks, 256, 0, s>>>(static_cast<uint8_t*>(data), n, by); break;
    case DataType::Int32: divideKernel<<<blocks, 256, 0, s>>>(static_cast<int32_t*>(data), n, by); break;
    case DataType::Uint32: divideKernel<<<blocks, 256, 0, s>>>(static_cast<uint32_t*>(data), n, by); break;
    case DataType::Int64: divideKernel<<<blocks, 256, 0, s>>>(static_cast<int64_t*>(data), n, by); break;
    case DataType::Uint64: divideKernel<<<blocks, 256, 0, s>>>(static_cast<uint64_t*>(data), n, by); break;
    case DataType::Float16: divideKernel<<<blocks, 256, 0, s>>>(static_cast<__half*>(data), n, by); break;
    case DataType::BFloat16: divideKernel<<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(data), n, by); break;
    case DataType::Float32: divideKernel<<<blocks, 256, 0, s>>>(static_cast<float*>(data), n, by); break;
    case DataType::Float64: divideKernel<<<blocks, 256, 0, s>>>(static_cast<double*>(data), n, by); break;
    case DataType::Float8E4M3: divideKernel<<<blocks, 256, 0, s>>>(static_cast<Fp8E4M3*>(data), n, by); break;
    case DataType::Float8E5M2: divideKernel<<<blocks, 256, 0, s>>>(static_cast<Fp8E5M2*>(data), n, by); break;
    default: return false;
  }
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace forestcc::executor
