#include "forestcc/error.hpp"

#include <cstring>

namespace forestcc {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage: return "invalid usage";
    case ErrorCode::System: return "system error";
    case ErrorCode::Remote: return "remote error";
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::Aborted: return "aborted";
    case ErrorCode::Internal: return "internal error";
    case ErrorCode::Mismatch: return "mismatched calls";
    case ErrorCode::Interrupted: return "interrupted";
    case ErrorCode::InvalidType: return "invalid type";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message, int rank, int peer)
    : std::runtime_error(message), code_(code), rank_(rank), peer_(peer) {}

std::string rankPrefix(int rank) {
  return rank >= 0 ? "forestcc rank " + std::to_string(rank) + ": " : "forestcc: ";
}

void throwSystemError(const std::string& call, int err, int rank, int peer) {
  throw Error(ErrorCode::System, rankPrefix(rank) + call + ": " + std::strerror(err), rank, peer);
}

}  // namespace forestcc
