#include "transport/shm/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

// Names of owned segments in a fixed table, so a fatal-signal handler can unlink them without
// allocating or locking, each with the pid of the process that made it: a child forked from a
// rank inherits the table (and the handlers, and the atexit), and must unlink only its own
// (before, a DataLoader-style child that exited or got SIGTERM unlinked its parent's live
// segments, and the parent's next connect failed). Untouched entries cost no memory.
constexpr int kMaxOwned = 65536;
constexpr int kNameLen = 96;
constexpr const char* kShmDir = "/dev/shm";  // where Linux keeps POSIX shared-memory names
char gOwned[kMaxOwned][kNameLen];
pid_t gOwnedBy[kMaxOwned];
std::atomic<int> gOwnedCount{0};
// One past the highest entry ever used: entries fill from the bottom, so the scans below stop
// near the number of live segments, not at the table's size.
std::atomic<int> gOwnedTop{0};
std::mutex gOwnedMu;
std::atomic<uint64_t> gSeq{0};

// False when the table is full (the segment would outlive a signal unlisted: not made).
bool addOwned(const std::string& name) {
  std::lock_guard<std::mutex> g(gOwnedMu);
  for (int i = 0; i < kMaxOwned; ++i) {
    if (gOwned[i][0] == '\0') {
      std::snprintf(gOwned[i], kNameLen, "%s", name.c_str());
      gOwnedBy[i] = getpid();
      gOwnedCount.fetch_add(1);
      if (i >= gOwnedTop.load()) gOwnedTop.store(i + 1);
      return true;
    }
  }
  return false;
}

// Async-signal-safe: this process's own segments (getpid() is safe in a handler).
void unlinkOwnSegments() {
  const pid_t self = getpid();
  const int top = gOwnedTop.load();
  for (int k = 0; k < top; ++k)
    if (gOwned[k][0] != '\0' && gOwnedBy[k] == self) shm_unlink(gOwned[k]);
}

void removeOwned(const std::string& name) {
  std::lock_guard<std::mutex> g(gOwnedMu);
  const int top = gOwnedTop.load();
  for (int i = 0; i < top; ++i) {
    if (name == gOwned[i]) {
      gOwned[i][0] = '\0';
      gOwnedCount.fetch_sub(1);
      return;
    }
  }
}

constexpr int kFatalSignals[] = {SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr int kFatalCount = sizeof(kFatalSignals) / sizeof(int);
struct sigaction gPrevious[kFatalCount];

// A request to terminate that a program may catch and survive (checkpoint on SIGTERM, reload on
// SIGHUP), unlike a fault.
bool terminationRequest(int sig) { return sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT; }

bool isHandler(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != nullptr : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
}

// Unlinks the owned segments, then lets the signal end the process with its previous
// disposition. Not installed for a termination request the program handles itself (below).
void onFatalSignal(int sig, siginfo_t*, void*) {
  int i = 0;
  while (i < kFatalCount && kFatalSignals[i] != sig) ++i;
  if (i == kFatalCount) return;
  const struct sigaction& previous = gPrevious[i];
  unlinkOwnSegments();
  sigaction(sig, &previous, nullptr);
  raise(sig);  // delivered when this handler returns, with the previous disposition
}

// A normal exit also unlinks: Python does not promise to destroy module globals (the default
// communicator) at interpreter exit, and not every launcher sweeps after the job (mpirun).
void unlinkOwnedAtExit() { unlinkOwnSegments(); }

void installSignalCleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(unlinkOwnedAtExit);
    for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(int); ++i) {
      struct sigaction sa {};
      sa.sa_sigaction = onFatalSignal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_SIGINFO | SA_RESTART;
      struct sigaction prev {};
      sigaction(kFatalSignals[i], nullptr, &prev);
      if (prev.sa_handler == SIG_IGN) continue;  // keep what the program asked for
      // A program that handles SIGTERM/SIGHUP/SIGQUIT itself (checkpoint on SIGTERM, installed
      // before forestcc: Python's signal.signal) may go on after it, using its segments: its
      // handler stays as it is, flags included, and the segments are unlinked at exit.
      if (terminationRequest(kFatalSignals[i]) && isHandler(prev)) continue;
      gPrevious[i] = prev;
      sigaction(kFatalSignals[i], &sa, nullptr);
    }
    // A previous job killed with SIGKILL may have left segments behind.
    sweepStaleSegments();
  });
}

uint32_t randomTag() {
  std::random_device rd;
  return rd();
}

}  // namespace

bool processAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie still answers kill(); it is dead for our purposes.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[256] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');
  if (!close || close + 2 >= buf + n) return true;
  return close[2] != 'Z' && close[2] != 'X';
}

std::shared_ptr<ShmSegment> ShmSegment::create(size_t size, const std::string& tag) {
  installSignalCleanup();
  char name[kNameLen];
  std::snprintf(name, sizeof name, "/%s-%d-%llu-%08x-%s", config::shmPrefix().c_str(), getpid(),
                static_cast<unsigned long long>(gSeq.fetch_add(1)), randomTag(), tag.c_str());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throwSystemError(std::string("shm_open(") + name + ")", errno);
  size_t mapSize = size ? size : 1;
  // posix_fallocate, not ftruncate alone: tmpfs reserves nothing for a truncated size, so a full
  // /dev/shm was found by the first store into a page (SIGBUS, the rank killed, inside a
  // collective too); reserving the pages makes it this error instead.
  if (const int rc = posix_fallocate(fd, 0, static_cast<off_t>(mapSize)); rc != 0) {
    close(fd);
    shm_unlink(name);
    throwSystemError(std::string("posix_fallocate(") + name + ", " + std::to_string(mapSize) +
                         ") (is /dev/shm large enough? df -h /dev/shm)",
                     rc);
  }
  void* p = mmap(nullptr, mapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    throwSystemError(std::string("mmap(") + name + ")", err);
  }
  if (!addOwned(name)) {
    munmap(p, mapSize);
    shm_unlink(name);
    throwSystemError(std::string("shm_open(") + name + "): this process already holds " +
                         std::to_string(kMaxOwned) + " forestcc segments (the most it can unlink on a signal)",
                     EMFILE);
  }
  return std::shared_ptr<ShmSegment>(new ShmSegment(name, p, size, getpid()));
}

std::shared_ptr<ShmSegment> ShmSegment::open(const std::string& name, size_t size, int rank, int peer) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0)
    throwSystemError("shm_open(" + name + ") of rank " + std::to_string(peer) +
                         " (does it share /dev/shm with this rank? set FORESTCC_NODE_ID to tell nodes apart)",
                     errno, rank, peer);
  size_t mapSize = size ? size : 1;
  void* p = mmap(nullptr, mapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) throwSystemError("mmap(" + name + ")", err, rank, peer);
  return std::shared_ptr<ShmSegment>(new ShmSegment(name, p, size, 0));
}

namespace {
std::atomic<uint64_t> gAllocationGeneration{1};
}  // namespace

uint64_t sharedAllocationGeneration() { return gAllocationGeneration.load(std::memory_order_acquire); }

ShmSegment::~ShmSegment() {
  munmap(data_, size_ ? size_ : 1);
  gAllocationGeneration.fetch_add(1, std::memory_order_acq_rel);  // the address may be reused
  if (ownerPid_) {
    // A forked child's copy going leaves the name to the process that made it.
    if (ownerPid_ == getpid()) shm_unlink(name_.c_str());
    removeOwned(name_);
  }
}

bool ShmSegment::linked() const {
  struct stat st;
  return ::stat((kShmDir + name_).c_str(), &st) == 0;
}

int ownedSegmentCount() { return gOwnedCount.load(); }

// The pid in a name made by create() ("<pid>-<seq>-<8 hex>-<tag>" after the prefix), or 0 when
// `rest` is not of that shape: another job whose prefix extends this one ("fcc-7" against "fcc")
// makes names that start alike, and its live segments must not be taken for a dead pid 7's.
static int ownerOf(const char* rest) {
  auto digits = [](const char*& p) {
    const char* start = p;
    while (*p >= '0' && *p <= '9') ++p;
    return p > start;
  };
  const char* p = rest;
  if (!digits(p) || *p != '-') return 0;
  const int pid = std::atoi(rest);
  ++p;
  if (!digits(p) || *p != '-') return 0;
  ++p;
  for (int i = 0; i < 8; ++i, ++p)
    if (!std::isxdigit(static_cast<unsigned char>(*p))) return 0;
  return *p == '-' && p[1] != '\0' ? pid : 0;
}

int sweepStaleSegments() {
  std::string prefix = config::shmPrefix() + "-";
  DIR* d = opendir(kShmDir);
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    const int pid = ownerOf(e->d_name + prefix.size());
    if (pid > 0 && !processAlive(pid)) {
      if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0) ++removed;
    }
  }
  closedir(d);
  return removed;
}

// ---- allocations handed to users (forestcc.empty) ----

namespace {
std::mutex gAllocMu;
std::map<uintptr_t, std::weak_ptr<ShmSegment>> gAllocations;  // base address -> segment
}  // namespace

std::shared_ptr<ShmSegment> allocateShared(size_t size) {
  auto seg = ShmSegment::create(size, "buf");
  std::lock_guard<std::mutex> g(gAllocMu);
  for (auto it = gAllocations.begin(); it != gAllocations.end();)
    it = it->second.expired() ? gAllocations.erase(it) : std::next(it);
  gAllocations[reinterpret_cast<uintptr_t>(seg->data())] = seg;
  gAllocationGeneration.fetch_add(1, std::memory_order_acq_rel);
  return seg;
}

std::shared_ptr<ShmSegment> findSharedAllocation(const void* ptr, size_t size, size_t* offset) {
  std::lock_guard<std::mutex> g(gAllocMu);
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = gAllocations.upper_bound(addr);
  if (it == gAllocations.begin()) return nullptr;
  --it;
  auto seg = it->second.lock();
  if (!seg || addr + size > it->first + seg->size()) return nullptr;
  *offset = addr - it->first;
  return seg;
}

}  // namespace forestcc
