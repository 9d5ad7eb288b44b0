// Registered memory: a local buffer plus a serializable handle that lets a peer reach it.
// Host memory in a forestcc shared-memory segment is mapped by same-node peers (direct
// loads/stores); other host memory is reached with single-copy cross-process reads/writes
// (process_vm_readv/writev); GPU memory will travel as a CUDA IPC handle; other nodes go through TCP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace forestcc {

enum class MemoryKind : uint32_t { Host = 0, Cuda = 1 };

// The ways a peer's memory is reached (cpp/src/transport/<name>/, docs/transports.md).
enum class TransportKind : uint32_t { Shm = 0, Cma = 1, CudaIpc = 2, Tcp = 3 };
const char* transportName(TransportKind kind);  // "shm", "cma", "cuda_ipc", "tcp"

// Plain data, sent to peers as bytes. The communicator fills the common fields; each transport
// fills its own (Transport::registerMemory, the one place that knows them) and reads them back
// when a peer's connection attaches the handle.
struct MemoryHandle {
  uint32_t version = 1;
  // common: what the memory is and whose
  MemoryKind kind = MemoryKind::Host;
  int32_t ownerRank = -1;
  int32_t ownerPid = 0;    // cma: the process its copies go to (0: not reachable by cma)
  uint64_t nodeHash = 0;
  uint64_t address = 0;    // in the owner's address space
  uint64_t size = 0;
  // shm: the forestcc shared segment it lies in, which peers map
  uint64_t shmOffset = 0;  // offset of `address` inside the shared segment
  uint64_t shmSize = 0;
  uint64_t shmId = 0;      // a hash of shmName, never 0 (0: not in a forestcc segment); caches key on it
  char shmName[96] = {};   // empty: not in a forestcc segment
  // cuda_ipc (GPU memory, transport/cuda_ipc/): the IPC handle of the allocation the memory lies
  // in, the memory's offset in it, and the allocation's unique id (importers cache on it)
  uint8_t cudaIpc[64] = {};
  uint64_t cudaOffset = 0;
  uint64_t cudaBufferId = 0;
  int32_t cudaDevice = -1;
};

class ShmSegment;

class RegisteredMemory {
 public:
  RegisteredMemory() = default;
  RegisteredMemory(void* data, size_t size, const MemoryHandle& handle, std::shared_ptr<void> keepAlive)
      : data_(data), size_(size), handle_(handle), keepAlive_(std::move(keepAlive)) {}

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const MemoryHandle& handle() const { return handle_; }
  bool sharedSegment() const { return handle_.shmName[0] != '\0'; }

  std::string serialize() const;
  static MemoryHandle deserialize(const std::string& bytes);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  MemoryHandle handle_;
  std::shared_ptr<void> keepAlive_;  // the segment, when the memory lives in one
};

// Host memory a same-node peer can map (zero-copy for channels and collectives).
class SharedAllocation {
 public:
  explicit SharedAllocation(size_t size);
  void* data() const;
  size_t size() const;
  const std::string& name() const;

 private:
  std::shared_ptr<ShmSegment> segment_;
};

// Segments whose owner died (SIGKILL) are removed; returns the count. forestcc-run calls it after
// a job, and every process calls it once when it first creates a segment.
int sweepStaleSharedMemory();
int ownedSharedMemorySegments();

}  // namespace forestcc
