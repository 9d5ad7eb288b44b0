#include "transport/transport.hpp"

namespace forestcc {

const char* transportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::Shm: return "shm";
    case TransportKind::Cma: return "cma";
    case TransportKind::CudaIpc: return "cuda_ipc";
    case TransportKind::Tcp: return "tcp";
  }
  return "unknown";
}

}  // namespace forestcc
