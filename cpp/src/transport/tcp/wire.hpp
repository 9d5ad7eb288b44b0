// What travels on a tcp connection's sockets: a fixed header per message, then its body. Data
// (puts, and the answers to gets) goes straight from the sender's memory into the receiver's:
// the receiving proxy reads a put's bytes into their destination, never into a staging buffer.
//
// Ordering. A peer pair has `streams` sockets; stream 0 carries every control message in order
// (signals, the per-call mailbox, send posts and answers, get completions, aborts, goodbye), and
// puts are cut into pieces spread over all streams. A signal must not land before the data put
// before it, which may still be in flight on another socket, so a signal (and a get's
// completion) carries how many pieces the sender had queued on each stream before it, and the
// receiver applies it only once that many have arrived on each (TcpPeer::applyControl).
#pragma once

#include <cstdint>

#include "transport/control_block.hpp"
#include "forestcc/memory.hpp"

namespace forestcc::tcp {

// Pieces of a large put are at least this large (smaller ones cost more than the parallelism
// of several sockets gains) and the put is spread over the streams in pieces of this size or
// larger.
constexpr uint64_t kMinPieceBytes = 64 << 10;
constexpr int kMaxStreams = 16;

enum class MessageType : uint8_t {
  Hello = 1,   // body: Hello (both sides, once per socket, before anything else)
  Put,         // a: destination address in the receiver; c: bytes, which follow
  Signal,      // set, a: the semaphore; body: pieces sent per stream before it
  Mailbox,     // body: MailboxMessage (+ block offsets)
  GetRequest,  // a: request id; b: source address in the receiver; c: bytes; body: destination in the sender
  GetDone,     // a: request id; body: pieces sent per stream before it (the data went as Puts)
  SendPost,    // body: the MemoryHandle of the buffer the sender posts to the receiver
  SendAnswer,  // a: the receiver's status of the last post (int64)
  Abort,       // a: the call; b: the ErrorCode; body: the reason
  Goodbye,     // the peer destroys its communicator: its sockets close after this, and that is no death
};

struct WireHeader {
  MessageType type;
  uint8_t set = 0;  // Signal: SemaphoreSet
  uint16_t reserved = 0;
  uint32_t bodyBytes = 0;  // the control body that follows (not a Put's data)
  uint64_t a = 0, b = 0, c = 0;
};
static_assert(sizeof(WireHeader) == 32, "the wire header is 32 bytes on every build");

// Exchanged on each socket when the connection is made, both ways.
struct Hello {
  uint64_t magic;       // kHelloMagic
  uint64_t token;       // the communicator's (same on every rank): a stray connection is refused
  int32_t rank;         // the sender
  int32_t stream;       // which of the pair's sockets this is
  int32_t streams;      // how many the sender has (both must agree)
  int32_t reserved;
  uint64_t banks[2];    // the sender's eager scratch banks, in its address space
};
constexpr uint64_t kHelloMagic = 0x4f4c4c4548504354ull;  // "TCPHELLO"

// What a rank states when it enters a call, as its peers on other nodes receive it
// (callPublished): a CallMailbox without the parts the peer does not need.
struct MailboxMessage {
  uint64_t sequence;
  CallStamp stamp;       // of call `sequence`
  int32_t eagerBank;     // -1, or the bank whose eager stamp follows
  int32_t offsetCount;   // nranks + 1 when the call has variable blocks (all_to_all_v), else 0
  CallStamp eagerStamp;
  MemoryHandle handles[3];
  // followed by offsetCount uint64 of input block offsets, then offsetCount of output ones
};

}  // namespace forestcc::tcp
