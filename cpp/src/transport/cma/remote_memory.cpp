#include "transport/cma/remote_memory.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "forestcc/error.hpp"

namespace forestcc {

namespace {

[[noreturn]] void cmaFailure(const char* call, int err, int rank, int peer, int pid) {
  std::string hint = err == EPERM || err == EACCES
                         ? " (cross-process access is not permitted here: allocate buffers with "
                           "forestcc.empty() so peers can map them)"
                         : err == ESRCH ? " (the peer process has exited)" : "";
  throw Error(err == ESRCH ? ErrorCode::Remote : ErrorCode::System,
              rankPrefix(rank) + call + " to rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                  "): " + std::strerror(err) + hint,
              rank, peer);
}

}  // namespace

// process_vm_writev and process_vm_readv share a signature: one loop serves both directions.
using CrossProcessCopy = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                                     unsigned long);

static void crossProcessCopy(CrossProcessCopy call, const char* name, void* local, uint64_t remoteAddress,
                             size_t bytes, const RemoteMemory& m) {
  size_t done = 0;
  while (done < bytes) {
    iovec here{static_cast<char*>(local) + done, bytes - done};
    iovec there{reinterpret_cast<void*>(remoteAddress + done), bytes - done};
    ssize_t n = call(m.pid, &here, 1, &there, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      cmaFailure(name, errno, m.rank, m.peer, m.pid);
    }
    done += static_cast<size_t>(n);
  }
}

void RemoteMemory::write(uint64_t offset, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  crossProcessCopy(process_vm_writev, "process_vm_writev", const_cast<void*>(src), address + offset, bytes, *this);
}

void RemoteMemory::read(uint64_t offset, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  crossProcessCopy(process_vm_readv, "process_vm_readv", dst, address + offset, bytes, *this);
}

}  // namespace forestcc
