// The plan interpreter (executor/interpreter.hpp) instantiated for a CUDA backend: one thread
// block per plan worker, its threads copying and reducing together, thread 0 signalling and
// polling. It compiles in every build that finds nvcc, so the interpreter cannot grow anything a
// GPU cannot run (strings, exceptions, allocation). It is not called yet: the CUDA IPC transport
// (peer GPU memory mapped into this process) and the GPU runner that launches it come with the
// GPU memory issue. Peer memory here is mapped only (CUDA IPC); write/read through a proxy are
// reported as Unsupported, like a timeout is reported as a Timeout failure the host then formats.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "executor/interpreter.hpp"
#include "forestcc/collectives.hpp"

namespace forestcc::executor {

namespace {

// What the host prepares for a launch: plain data in device-visible memory.
struct DeviceChannel {
  int peer;
  uint64_t* inbound;   // this rank's semaphore word (device or mapped host memory)
  uint64_t* outbound;  // the peer's, mapped through CUDA IPC
  uint64_t expected;   // signals consumed before this call
  RemoteBuffer buffers[plan::kBufferCount];  // the peer's buffers of this call, mapped
  RemoteBuffer bank;                         // the peer's eager scratch bank of this call
};

struct DevicePlan {
  const plan::Op* ops;         // every worker's ops, back to back
  const uint32_t* opBegin;     // worker w: ops[opBegin[w], opBegin[w + 1])
  DeviceChannel* channels;
  CallGeometry geometry;
  DataType dtype;
  ReduceOp op;
  long long timeoutCycles;     // a wait's deadline in clock64() cycles
  Failure* failures;           // one per worker
};

template <class T>
__device__ T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return b < a ? b : a;
    case ReduceOp::Max: return a < b ? b : a;
    default: return a + b;  // Sum; Avg divides at the end
  }
}

// 16-bit floats accumulate in float, as on the CPU.
template <class T>
__device__ float widen(T v) { return static_cast<float>(v); }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widen(__half v) { return __half2float(v); }

template <class T>
__device__ void reduceTyped(char* dst, const char* const* srcs, int n, uint64_t elements, ReduceOp op) {
  T* out = reinterpret_cast<T*>(dst);
  for (uint64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    T acc = reinterpret_cast<const T*>(srcs[0])[i];
    for (int s = 1; s < n; ++s) acc = combine(acc, reinterpret_cast<const T*>(srcs[s])[i], op);
    out[i] = acc;
  }
}

template <class T>
__device__ void reduceHalfTyped(char* dst, const char* const* srcs, int n, uint64_t elements, ReduceOp op) {
  T* out = reinterpret_cast<T*>(dst);
  for (uint64_t i = threadIdx.x; i < elements; i += blockDim.x) {
    float acc = widen(reinterpret_cast<const T*>(srcs[0])[i]);
    for (int s = 1; s < n; ++s) acc = combine(acc, widen(reinterpret_cast<const T*>(srcs[s])[i]), op);
    out[i] = T(acc);
  }
}

struct DeviceBackend {
  const DevicePlan& plan;
  DeviceChannel* channels;

  __device__ int peerOf(int channel) const { return channels[channel].peer; }

  __device__ bool remote(int channel, plan::Buffer b, RemoteBuffer& out, Failure&) {
    out = channels[channel].buffers[static_cast<int>(b)];
    return true;
  }
  __device__ bool bank(int channel, RemoteBuffer& out, Failure&) {
    out = channels[channel].bank;
    return true;
  }

  __device__ void copy(char* dst, const char* src, uint64_t bytes) {
    for (uint64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
    __syncthreads();
  }
  // Overlapping ranges (a copy within one buffer): one thread, in the safe direction.
  __device__ void move(char* dst, const char* src, uint64_t bytes) {
    if (threadIdx.x == 0) {
      if (dst < src)
        for (uint64_t i = 0; i < bytes; ++i) dst[i] = src[i];
      else
        for (uint64_t i = bytes; i-- > 0;) dst[i] = src[i];
    }
    __syncthreads();
  }

  __device__ void reduce(char* dst, const char* const* srcs, int n, uint64_t elements) {
    switch (plan.dtype) {
      case DataType::Int8: reduceTyped<int8_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Uint8: reduceTyped<uint8_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Int32: reduceTyped<int32_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Uint32: reduceTyped<uint32_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Int64: reduceTyped<int64_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Uint64: reduceTyped<uint64_t>(dst, srcs, n, elements, plan.op); break;
      case DataType::Float16: reduceHalfTyped<__half>(dst, srcs, n, elements, plan.op); break;
      case DataType::BFloat16: reduceHalfTyped<__nv_bfloat16>(dst, srcs, n, elements, plan.op); break;
      case DataType::Float32: reduceTyped<float>(dst, srcs, n, elements, plan.op); break;
      case DataType::Float64: reduceTyped<double>(dst, srcs, n, elements, plan.op); break;
    }
    __syncthreads();
  }

  __device__ bool unsupported(Failure& f) {
    f.kind = FailureKind::Unsupported;
    return false;
  }
  __device__ bool write(int, const RemoteBuffer&, uint64_t, const char*, uint64_t, Failure& f) { return unsupported(f); }
  __device__ bool read(int, const RemoteBuffer&, uint64_t, char*, uint64_t, Failure& f) { return unsupported(f); }
  __device__ bool readReduce(int, const RemoteBuffer&, uint64_t, char*, const char* const*, int, uint64_t, Failure& f) {
    return unsupported(f);
  }

  __device__ void signal(int channel) {
    __syncthreads();  // every thread's writes of this worker come before the flag
    if (threadIdx.x == 0) {
      __threadfence_system();
      atomicAdd(reinterpret_cast<unsigned long long*>(channels[channel].outbound), 1ull);
    }
  }
  __device__ void flush(int) { __threadfence_system(); }

  __device__ bool wait(int channel, Failure& f) {
    DeviceChannel& ch = channels[channel];
    __shared__ int ok;
    if (threadIdx.x == 0) {
      const uint64_t want = ch.expected + 1;
      const long long start = clock64();
      ok = 1;
      while (*reinterpret_cast<volatile uint64_t*>(ch.inbound) < want) {
        if (clock64() - start > plan.timeoutCycles) {
          ok = 0;
          break;
        }
      }
      if (ok) ch.expected = want;
      __threadfence();
    }
    __syncthreads();
    if (ok) return true;
    f.kind = FailureKind::Timeout;
    f.peer = ch.peer;
    return false;
  }
};

// Block w runs worker w's ops; a failure is recorded for the host, which formats it (failure.cpp).
__global__ void interpretPlan(DevicePlan plan) {
  const int worker = blockIdx.x;
  DeviceBackend backend{plan, plan.channels};
  Interpreter<DeviceBackend> interpreter(plan.geometry, backend);
  const uint32_t begin = plan.opBegin[worker], end = plan.opBegin[worker + 1];
  const Failure f = interpreter.run(plan.ops + begin, end - begin);
  if (threadIdx.x == 0) plan.failures[worker] = f;
}

}  // namespace

// Host entry, referenced so the kernel is kept: launches one block per worker on `stream`.
cudaError_t launchInterpreter(const void* devicePlan, int workers, int threads, cudaStream_t stream) {
  interpretPlan<<<workers, threads, 0, stream>>>(*static_cast<const DevicePlan*>(devicePlan));
  return cudaGetLastError();
}

}  // namespace forestcc::executor
