#include <cstring>

#include "forestcc/error.hpp"
#include "forestcc/memory.hpp"

namespace forestcc {

std::string RegisteredMemory::serialize() const {
  return std::string(reinterpret_cast<const char*>(&handle_), sizeof handle_);
}

MemoryHandle RegisteredMemory::deserialize(const std::string& bytes) {
  MemoryHandle h;
  if (bytes.size() != sizeof h)
    throw Error(ErrorCode::Internal, "forestcc: memory handle of " + std::to_string(bytes.size()) +
                                         " bytes, expected " + std::to_string(sizeof h) + " (mixed versions?)");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.version != 1) throw Error(ErrorCode::Internal, "forestcc: unknown memory handle version");
  return h;
}

}  // namespace forestcc
