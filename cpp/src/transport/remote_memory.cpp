#include "transport/remote_memory.hpp"

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

void RemoteMemory::write(uint64_t offset, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  if (mapped) {
    std::memcpy(mapped + offset, src, bytes);
    return;
  }
  size_t done = 0;
  while (done < bytes) {
    iovec local{const_cast<char*>(static_cast<const char*>(src)) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + offset + done), bytes - done};
    ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      cmaFailure("process_vm_writev", errno, rank, peer, pid);
    }
    done += static_cast<size_t>(n);
  }
}

void RemoteMemory::read(uint64_t offset, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  if (mapped) {
    std::memcpy(dst, mapped + offset, bytes);
    return;
  }
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + offset + done), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      cmaFailure("process_vm_readv", errno, rank, peer, pid);
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace forestcc
