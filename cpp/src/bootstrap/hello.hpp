// The first message on every bootstrap connection, and the answer to it. A rank joining the
// rendezvous and a rank opening a point-to-point connection both say who they are (job magic,
// rank, size); the listening side answers with a status before anything else is exchanged, so a
// process that reached the wrong job learns it at once instead of waiting for its timeout.
#pragma once

#include <cstdint>
#include <cstring>

namespace forestcc {

constexpr uint32_t kHelloRendezvous = 1;  // a rank joining rank 0
constexpr uint32_t kHelloPeer = 2;        // a rank opening a point-to-point connection
constexpr uint32_t kHelloInvitation = 3;  // a new rank asking its invitation's host for the job's id

struct Hello {
  char tag[4] = {'F', 'C', 'C', 'H'};
  uint32_t kind = 0;
  uint64_t magic = 0;
  int32_t rank = -1;
  int32_t nranks = 0;
  uint16_t listenPort = 0;
  uint8_t pad[6] = {};

  static Hello of(uint32_t kind, uint64_t magic, int32_t rank, int32_t nranks) {
    Hello h;
    h.kind = kind;
    h.magic = magic;
    h.rank = rank;
    h.nranks = nranks;
    return h;
  }
  bool fromJob(uint64_t jobMagic) const { return std::memcmp(tag, "FCCH", 4) == 0 && magic == jobMagic; }
};
static_assert(sizeof(Hello) == 32, "Hello is a wire format");

enum HelloStatus : uint32_t {
  kOk = 0, kWrongMagic = 1, kBadRank = 2, kDuplicateRank = 3, kSizeMismatch = 4, kNotNew = 5
};

inline const char* helloStatusText(uint32_t s) {
  switch (s) {
    case kWrongMagic: return "wrong magic: the unique id belongs to another job (or is stale)";
    case kBadRank: return "rank out of range";
    case kDuplicateRank: return "another process already joined with this rank";
    case kSizeMismatch: return "ranks disagree on the number of ranks";
    case kNotNew: return "the rank is one of the communicator's existing ranks, not a new one";
  }
  return "refused";
}

}  // namespace forestcc
