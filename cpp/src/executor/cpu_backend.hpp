// The interpreter's CPU backend: one per worker thread and call. Copies are memcpy (streaming
// stores for large calls), reductions the CPU kernels, waits poll this rank's semaphore word with
// the communicator's deadline and watch the peer meanwhile; a peer's memory that is not mapped is
// reached through its connection. Errors are C++ exceptions kept aside (`error`): the interpreter
// stops at the step and the runner rethrows them with the step named (Executor::raiseFailure).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <vector>

#include "executor/copy_kernels.hpp"
#include "executor/executor.hpp"
#include "executor/reduce_kernels.hpp"
#include "transport/doorbell.hpp"

namespace forestcc::executor {

// The state of one call, shared by its workers.
struct Executor::Call {
  const CompiledPlan* plan = nullptr;
  const CallBuffers* buffers = nullptr;
  uint64_t sequence = 0;
  CallGeometry geometry;
  bool variable = false;   // all_to_all_v block layout
  bool streaming = false;  // copy with streaming stores (large calls, copy_kernels.hpp)
  int bank = -1;           // eager plans: the scratch bank of this call (every rank agrees)
  uint32_t packetFlag = 0; // eager calls with packets: the flag of this call (packets.hpp)
  CallStamp stamp{};       // what this rank says the call is (control_block.hpp)
};


struct CpuBackend {
  Executor& ex;
  Executor::Call& call;
  int worker;
  std::exception_ptr error;

  int peerOf(int channel) const { return call.plan->channels[channel].peer; }
  bool afterOp(Failure&) { return true; }

  bool fail(Failure& f) {
    error = std::current_exception();
    f.kind = FailureKind::Backend;
    return false;
  }

  bool remote(int channel, plan::Buffer b, RemoteBuffer& out, Failure& f) {
    const ExecChannel& ch = call.plan->channels[channel];
    const int i = static_cast<int>(b);
    const CallGeometry& g = call.geometry;
    if (!ch.link) {  // loopback: this rank's own buffer
      out = {g.local[i], g.localBytes[i], g.localOffsets[i], 0};
      return true;
    }
    try {
      const PeerView& v = ex.peerView(call, worker, ch.peer);
      const PeerBuffer& pb = v.buffers[i];
      out.mapped = pb.region.mapped;
      out.bytes = pb.region.size;
      out.offsets = !call.variable ? nullptr
                    : b != plan::Buffer::Scratch ? v.blockOffsets[i]
                    : call.plan->laysOutScratch ? ex.scratchOffsets_[ch.peer].data()
                                                : nullptr;
      out.handle = reinterpret_cast<uint64_t>(&pb);
      return true;
    } catch (...) {
      return fail(f);
    }
  }

  bool bank(int channel, RemoteBuffer& out, Failure& f) {
    (void)f;
    const ExecChannel& ch = call.plan->channels[channel];
    if (!ch.link) {
      out = {call.geometry.local[static_cast<int>(plan::Buffer::Scratch)], 0, nullptr, 0};
      return true;
    }
    // Reachable since the communicator was made; the peer need not have entered the call.
    const PeerBuffer& pb = ch.banks[call.bank];
    out = {pb.region.mapped, pb.region.mapped ? 0 : pb.region.size, nullptr, reinterpret_cast<uint64_t>(&pb)};
    return true;
  }
  // The executor gave this call's bank as the scratch (Executor::run).
  char* ownBank(char* scratch) const { return scratch; }

  // Packets (packets.hpp) into a peer's bank, which every rank of a packet plan maps (one node).
  // Each word is one 8-byte store; the peer's doorbell is rung as a signal would.
  bool putPackets(int channel, const RemoteBuffer& b, uint64_t offset, const char* src, uint64_t bytes, Failure& f) {
    const ExecChannel& ch = call.plan->channels[channel];
    if (!b.mapped) {
      f.kind = FailureKind::Unsupported;
      return false;
    }
    uint64_t* out = reinterpret_cast<uint64_t*>(b.mapped + offset);
    const auto* in = reinterpret_cast<const unsigned char*>(src);
    const uint32_t flag = call.packetFlag;
    const uint64_t n = packetCount(bytes);
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t v = packetData(in, k, bytes);
      __atomic_store_n(out + 2 * k, packetWord(static_cast<uint32_t>(v), flag), __ATOMIC_RELEASE);
      __atomic_store_n(out + 2 * k + 1, packetWord(static_cast<uint32_t>(v >> 32), flag), __ATOMIC_RELEASE);
    }
    if (ch.doorbell) ringDoorbell(*ch.doorbell);
    return true;
  }

  // Unpacks packets as they arrive; blocks (as a wait does, watching the peer) until all did.
  bool awaitPackets(int channel, const char* packets, char* dst, uint64_t bytes, Failure& f) {
    const ExecChannel& ch = call.plan->channels[channel];
    const uint64_t* in = reinterpret_cast<const uint64_t*>(packets);
    auto* out = reinterpret_cast<unsigned char*>(dst);
    const uint32_t flag = call.packetFlag;
    const uint64_t n = packetCount(bytes);
    uint64_t done = 0;
    auto ready = [&] {
      for (; done < n; ++done) {
        const uint64_t w0 = __atomic_load_n(in + 2 * done, __ATOMIC_ACQUIRE);
        const uint64_t w1 = __atomic_load_n(in + 2 * done + 1, __ATOMIC_ACQUIRE);
        if (!packetArrived(w0, w1, flag)) return false;
        unpackData(out, done, bytes, (w1 << 32) | static_cast<uint32_t>(w0));
      }
      return true;
    };
    if (ready()) return true;
    try {
      ex.blockInWait(call, worker, ch, ready, f, "the packets");
    } catch (...) {
      return fail(f);
    }
    return true;
  }

  void copy(char* dst, const char* src, uint64_t bytes) { copyBytes(dst, src, bytes, call.streaming); }
  void move(char* dst, const char* src, uint64_t bytes) { std::memmove(dst, src, bytes); }
  void reduce(char* dst, const char* const* srcs, int n, uint64_t elements) {
    reduceElements(dst, reinterpret_cast<const void* const*>(srcs), n, elements, call.buffers->dtype,
                   call.buffers->op);
  }

  static const PeerBuffer& peerBuffer(const RemoteBuffer& b) { return *reinterpret_cast<const PeerBuffer*>(b.handle); }

  bool write(int, const RemoteBuffer& b, uint64_t offset, const char* src, uint64_t bytes, Failure& f) {
    try {
      const PeerBuffer& pb = peerBuffer(b);
      pb.connection->write(pb.region, offset, src, bytes);
      return true;
    } catch (...) {
      return fail(f);
    }
  }

  bool read(int, const RemoteBuffer& b, uint64_t offset, char* dst, uint64_t bytes, Failure& f) {
    try {
      const PeerBuffer& pb = peerBuffer(b);
      pb.connection->read(dst, pb.region, offset, bytes);
      return true;
    } catch (...) {
      return fail(f);
    }
  }

  // Tiles of a reduction whose result is put to the peers at once (Interpreter::reduceThenPut):
  // L2-sized, so the tile is still in cache for the puts. Not through a loopback channel (this
  // rank's own buffer, which the interpreter cannot tell apart from its operands) nor through a
  // proxy (tcp), whose every read is a round trip and reads whole 4 MiB tiles.
  static constexpr bool kTilesReductions = true;
  static constexpr uint64_t kReducePutTile = 256 << 10;
  uint64_t tileBytes(int channel, const RemoteBuffer& b) const {
    if (!call.plan->channels[channel].link) return 0;
    if (b.mapped) return kReducePutTile;
    return peerBuffer(b).connection->readTileBytes() <= kReducePutTile ? kReducePutTile : 0;
  }
  static uint64_t ownerAddress(const RemoteBuffer& b) { return peerBuffer(b).region.address; }

  // Unmapped peer memory comes over in L2-sized tiles that are reduced at once.
  bool readReduce(int, const RemoteBuffer& b, uint64_t offset, char* dst, const char* const* srcs, int n,
                  uint64_t bytes, Failure& f) {
    try {
      const PeerBuffer& pb = peerBuffer(b);
      const uint64_t elem = call.geometry.elem;
      std::vector<char>& bounce = ex.bounce_[worker];
      // Tiles as large as the connection asks for: L2-sized for cross-process copies (the tile
      // is still in cache when it is reduced), larger through a proxy, whose every read is a
      // round trip.
      const uint64_t tile = std::max<uint64_t>(1, pb.connection->readTileBytes() / elem) * elem;
      if (bounce.size() < tile) bounce.resize(tile);
      const char* tileSrcs[plan::kMaxReduceSources + 1];
      for (uint64_t off = 0; off < bytes; off += tile) {
        const uint64_t len = std::min(tile, bytes - off);
        pb.connection->read(bounce.data(), pb.region, offset + off, len);
        for (int i = 0; i < n; ++i) tileSrcs[i] = srcs[i] + off;
        tileSrcs[n] = bounce.data();
        reduce(dst + off, tileSrcs, n + 1, len / elem);
      }
      return true;
    } catch (...) {
      return fail(f);
    }
  }

  void signal(int channel) {
    const ExecChannel& ch = call.plan->channels[channel];
    if (ch.outbound) signalMapped(ch.outbound, *ch.doorbell);
    else ch.link->signal(SemaphoreSet::Plan, ch.pair);
  }

  void flush(int channel) {
    const ExecChannel& ch = call.plan->channels[channel];
    if (ch.link) ch.link->flush();
    std::atomic_thread_fence(std::memory_order_release);
  }

  bool wait(int channel, Failure& f) {
    const ExecChannel& ch = call.plan->channels[channel];
    const uint64_t want = *ch.expected + 1;
    if (__atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE) < want) {
      try {
        ex.blockInWait(call, worker, ch, [&] { return __atomic_load_n(ch.inbound, __ATOMIC_ACQUIRE) >= want; }, f,
                       "the signal");
      } catch (...) {
        return fail(f);
      }
    }
    *ch.expected = want;
    // The signal came from a peer in this call: its stamp must be this rank's before anything it
    // sent is used (eager calls compare theirs at the end, from their banks' stamps).
    if (ch.link && call.bank < 0 && ex.views_[worker][ch.peer].checked != call.sequence) {
      try {
        ex.confirmPeer(call, worker, ch, f);
      } catch (...) {
        return fail(f);
      }
    }
    return true;
  }
};

}  // namespace forestcc::executor
