// Low-latency packets (schedules/README.md, "Packets"): how an eager call's put_signal moves its
// data when the call runs with packets. Every 8 bytes of data travel in one 16-byte packet, as
// two 8-byte words that each hold 4 data bytes and the call's 32-bit flag; a word is written and
// read whole (an aligned 8-byte access is single-copy atomic on x86-64 and in the PTX memory
// model), so a reader that sees the flag in both words has the packet's data, with no signal
// after it and no fence before one. The flag of eager call i is 2i + 1: odd, so never the zero
// of memory no call wrote, and different from the flag of every call that used the same bank
// before (bank i mod 2 was last written by call i - 2).
//
// Layout: the call's scratch data in its bank (where the plan's chunks are, as without packets),
// its packet slots in the packet bank that follows the bank (transport/control_block.hpp) and
// that only packets are written into. A put of chunks starting at chunk
// `index`, byte `begin`, writes slots from packetSlot(begin, index): 8 data bytes per slot and
// one spare slot per chunk, so two puts of different chunks never share a slot, even when a
// chunk's bytes do not start at a multiple of 8 (and a put of no bytes has its one packet).
#pragma once

#include <cstdint>

#include "forestcc/semaphore_device.hpp"

namespace forestcc::executor {

constexpr uint64_t kPacketBytes = 16;
constexpr uint64_t kPacketDataBytes = 8;
// A wait op of a compiled plan whose sourceCount is this waits for packets: its dst and count
// are the chunks the peer's matching put_signal writes (executor/packet_plan.cpp).
constexpr uint8_t kPacketWait = 0xff;
// A call that moves its data as packets has this folded into its stamp's plan hash (numberCall):
// ranks that disagree on it would not find each other's data.
constexpr uint64_t kPacketsStampFold = 0x9e3779b97f4a7c15ull;

FORESTCC_HOST_DEVICE inline uint32_t packetFlag(uint64_t eagerCall) { return static_cast<uint32_t>(2 * eagerCall + 1); }
// At least one: a put of no bytes still tells the peer that this rank is in the call (what an
// eager plan's wait is for).
FORESTCC_HOST_DEVICE inline uint64_t packetCount(uint64_t bytes) {
  return bytes ? (bytes + kPacketDataBytes - 1) / kPacketDataBytes : 1;
}
FORESTCC_HOST_DEVICE inline uint64_t packetSlot(uint64_t begin, uint32_t index) { return begin / kPacketDataBytes + index; }
// The packet slots a call with `scratchBytes` of scratch in `scratchChunks` chunks may use, in
// bytes: packetSlot of the last byte of the last chunk, plus its packets, is below this.
inline uint64_t packetSlotBytes(uint64_t scratchBytes, uint64_t scratchChunks) {
  return kPacketBytes * (scratchBytes / kPacketDataBytes + 1 + scratchChunks);
}

// One word of a packet: 4 data bytes (little-endian, the low half) and the flag.
FORESTCC_HOST_DEVICE inline uint64_t packetWord(uint32_t data, uint32_t flag) { return uint64_t(flag) << 32 | data; }
FORESTCC_HOST_DEVICE inline bool packetArrived(uint64_t w0, uint64_t w1, uint32_t flag) {
  return uint32_t(w0 >> 32) == flag && uint32_t(w1 >> 32) == flag;
}
// Packet k's data: bytes [8k, 8k + 8) of `bytes`, the missing tail of the last packet zero.
FORESTCC_HOST_DEVICE inline uint64_t packetData(const unsigned char* src, uint64_t k, uint64_t bytes) {
  const uint64_t at = k * kPacketDataBytes;
  uint64_t v = 0;
  if (at + kPacketDataBytes <= bytes) {
    __builtin_memcpy(&v, src + at, kPacketDataBytes);
    return v;
  }
  for (uint64_t i = 0; i < kPacketDataBytes && at + i < bytes; ++i) v |= uint64_t(src[at + i]) << (8 * i);
  return v;
}
FORESTCC_HOST_DEVICE inline void unpackData(unsigned char* dst, uint64_t k, uint64_t bytes, uint64_t v) {
  const uint64_t at = k * kPacketDataBytes;
  if (at + kPacketDataBytes <= bytes) {
    __builtin_memcpy(dst + at, &v, kPacketDataBytes);
    return;
  }
  for (uint64_t i = 0; i < kPacketDataBytes && at + i < bytes; ++i) dst[at + i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace forestcc::executor
