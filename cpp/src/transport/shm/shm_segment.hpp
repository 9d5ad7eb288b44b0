// POSIX shared-memory segments that never outlive their job: the owner unlinks on release, on a
// fatal signal, and any later forestcc process (or forestcc-run) unlinks segments whose owner pid
// is dead (the SIGKILL case, which no handler sees).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace forestcc {

class ShmSegment {
 public:
  // Creates and maps a new segment of `size` bytes (zero-filled), named /<prefix>-<pid>-<seq>-<tag>.
  static std::shared_ptr<ShmSegment> create(size_t size, const std::string& tag);
  // Maps an existing segment created by another process on this node.
  static std::shared_ptr<ShmSegment> open(const std::string& name, size_t size, int rank, int peer);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool owner() const { return ownerPid_ != 0; }
  // False once the owner has released the segment (its name is unlinked): no one will publish it
  // again, so a peer's mapping of it only pins memory.
  bool linked() const;

 private:
  ShmSegment(std::string name, void* data, size_t size, int ownerPid)
      : name_(std::move(name)), data_(data), size_(size), ownerPid_(ownerPid) {}
  std::string name_;
  void* data_;
  size_t size_;
  int ownerPid_;  // the process that created it (only it unlinks the name); 0: opened, not owned
};

// Unlinks /dev/shm/<prefix>-<pid>-* whose pid is no longer alive. Returns how many it removed.
int sweepStaleSegments();
// Names of the segments this process owns now (for tests and diagnostics).
int ownedSegmentCount();

// The segment and offset that contain [ptr, ptr+size), if it lies inside memory this process
// allocated with allocateShared(); nullptr otherwise.
std::shared_ptr<ShmSegment> findSharedAllocation(const void* ptr, size_t size, size_t* offset);
// Changes whenever a shared allocation is made or any segment is unmapped, so a cached answer of
// findSharedAllocation for an address stays valid while the generation is the same.
uint64_t sharedAllocationGeneration();
// Host memory a same-node peer can map: what forestcc.empty() returns.
std::shared_ptr<ShmSegment> allocateShared(size_t size);

bool processAlive(int pid);

// The id of a segment's name (MemoryHandle::shmId): never 0, which means "not in a segment".
inline uint64_t shmSegmentId(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h | 1;
}

}  // namespace forestcc
