// The plan interpreter: runs one worker's ops of a compiled plan over a backend policy. Header-only
// and plain: no strings, exceptions, allocation or standard containers, so the same code compiles
// for CPU worker threads (cpu_backend.hpp, run by Executor::runWorker) and for CUDA thread blocks (cuda/interpreter_device.cu).
//
// The interpreter owns what every runner shares: the order of ops and slices, chunk arithmetic
// (schedules/README.md, "Buffers and chunks" and "Pipelining"), bounds checks of every byte range
// against the buffer it lies in, and size agreement between the two ends of a transfer. The backend
// owns how bytes move and how a wait polls:
//
//   bool remote(int channel, Buffer b, RemoteBuffer& out, Failure& f)   a peer's buffer of this call
//   bool bank(int channel, RemoteBuffer& out, Failure& f)               a peer's eager scratch bank
//   char* ownBank(char* scratch)                         this rank's bank of the call, given the
//                                                       geometry's scratch (the GPU picks it there)
//   void copy(char* dst, const char* src, uint64_t bytes)                local or mapped, no overlap
//   void move(char* dst, const char* src, uint64_t bytes)                local, may overlap
//   void reduce(char* dst, const char* const* srcs, int n, uint64_t elements)
//   bool write(int channel, const RemoteBuffer&, uint64_t offset, const char* src, uint64_t bytes, Failure&)
//   bool readReduce(int channel, const RemoteBuffer&, uint64_t offset, char* dst, const char* const* srcs,
//                   int n, uint64_t bytes, Failure&)     dst = op(srcs..., the peer's bytes): unmapped memory
//   bool read(int channel, const RemoteBuffer&, uint64_t offset, char* dst, uint64_t bytes, Failure&)
//   static constexpr bool kTilesReductions               whether reduceThenPut runs at all; then:
//   uint64_t tileBytes(int channel, const RemoteBuffer&)  bytes per tile when a reduction and the
//                                                       puts of its result run tile by tile through
//                                                       this buffer (reduceThenPut); 0: never
//   uint64_t ownerAddress(const RemoteBuffer&)          an unmapped buffer's address in its owner's process
//   void signal(int channel)                             release: after every earlier write of this worker
//   bool wait(int channel, Failure& f)                  acquire; false: failed (deadline, abort, ...)
//   bool putPackets(int channel, const RemoteBuffer& bank, uint64_t offset, const char* src, uint64_t bytes,
//                   Failure&)                           src as packets at `offset` of a peer's bank (packets.hpp)
//   bool awaitPackets(int channel, const char* packets, char* dst, uint64_t bytes, Failure& f)
//                                                       waits until every packet of `bytes` arrived, into dst
//   void flush(int channel)
//   int peerOf(int channel)
//   bool afterOp(Failure& f)                            an op finished (a GPU worker of several blocks
//                                                       meets its other blocks here); false: failed
//
// A failing backend call fills `f` (its kind, and for Backend failures whatever the backend keeps
// on the side, such as a CPU exception) and the interpreter stops, returning it with the step.
#pragma once

#include <cstdint>

#include "executor/packets.hpp"
#include "forestcc/plan.hpp"
#include "forestcc/semaphore_device.hpp"

namespace forestcc::executor {

// What stopped a worker; None: it ran to the end. Plain data: the host formats it (failure.cpp).
enum class FailureKind : uint8_t {
  None,
  OutOfRange,    // a byte range past the end of a buffer (a: begin, b: end, c: buffer size)
  SizeMismatch,  // the two ends of a transfer differ in size (a: this rank's bytes, b: the peer's)
  UnequalChunks, // a copy's or reduce's chunks differ in size (a: one, b: the other; a plan bug)
  Unsupported,   // the backend cannot do this op (e.g. unmapped memory on a GPU)
  Timeout,       // a wait passed its deadline
  Aborted,       // stopped because another worker failed or the host aborted the call (GPU runner)
  Backend,       // the backend raised its own error (the CPU runner keeps the exception)
};

struct Failure {
  FailureKind kind = FailureKind::None;
  uint32_t step = 0;
  uint32_t slice = 0;
  int32_t peer = -1;         // -1: this rank's own buffer
  uint8_t buffer = 0;        // plan::Buffer of a range failure
  uint8_t write = 0;         // SizeMismatch: 1 sends, 0 receives, 2 reduces
  uint8_t bank = 0;          // the range was of an eager scratch bank
  uint64_t a = 0, b = 0, c = 0;
};

// A peer's buffer of the current call: mapped (loads and stores) or reached through its connection.
struct RemoteBuffer {
  char* mapped = nullptr;
  uint64_t bytes = 0;
  const uint64_t* offsets = nullptr;  // all_to_all_v block offsets (nranks + 1 elements); else null
  uint64_t handle = 0;                // backend's own reference (CPU: the view it came from)
};

// The geometry of one call: what turns chunk numbers into byte ranges.
struct CallGeometry {
  uint64_t count = 0;       // c: elements per block
  uint32_t k = 1;           // chunks per block
  uint32_t slices = 1;      // pipelining slices of each chunk
  uint32_t elem = 1;        // element size in bytes
  char* local[plan::kBufferCount] = {nullptr, nullptr, nullptr};
  uint64_t localBytes[plan::kBufferCount] = {0, 0, 0};
  // all_to_all_v: input, output and (plans with scratch_blocks) scratch block offsets; else null.
  const uint64_t* localOffsets[plan::kBufferCount] = {nullptr, nullptr, nullptr};
  bool eager = false;       // scratch is the banks (a peer's scratch: its bank)
  // An eager call whose data travels as packets (packets.hpp): put_signal writes packets into the
  // peer's packet slots, a packet wait polls them; packetBase: where they start from a bank's start.
  bool packets = false;
  uint64_t packetBase = 0;
};

struct ElementRange {
  uint64_t begin, end;  // elements
};

// Chunk `index` of a buffer, slice `slice` of `slices`. `offsets` is non-null for all_to_all_v
// blocks (uneven sizes).
FORESTCC_HOST_DEVICE inline ElementRange chunkRange(uint64_t index, uint64_t c, uint32_t k, const uint64_t* offsets,
                                                    uint32_t slice, uint32_t slices) {
  const uint64_t block = index / k, part = index % k;
  uint64_t base, len;
  if (offsets) {
    base = offsets[block];
    len = offsets[block + 1] - base;
  } else {
    base = block * c;
    len = c;
  }
  const uint64_t lo = base + part * len / k, hi = base + (part + 1) * len / k;
  const uint64_t n = hi - lo;
  return {lo + slice * n / slices, lo + (uint64_t(slice) + 1) * n / slices};
}

template <class Backend>
class Interpreter {
 public:
  FORESTCC_HOST_DEVICE Interpreter(const CallGeometry& g, Backend& backend) : g_(g), be_(backend) {}

  // Runs ops[0, n) for every slice; returns the first failure (kind None when all ran).
  FORESTCC_HOST_DEVICE Failure run(const plan::Op* ops, uint32_t n) {
    Failure f;
    for (uint32_t slice = 0; slice < g_.slices; ++slice)
      for (uint32_t step = 0; step < n; ++step) {
        f.step = step;
        f.slice = slice;
        const uint32_t chain = getReduceChain(ops, step, n);
        if constexpr (Backend::kTilesReductions) {
          const uint32_t group = chain + putsOfResult(ops, step, chain, n);
          bool tiled = false;
          if (group > 1 && !reduceThenPut(ops + step, chain, group, f, tiled)) return f;
          f.step = step;
          if (tiled) {
            if (!be_.afterOp(f)) return f;
            step += group - 1;
            continue;
          }
        }
        if (!(chain > 1 ? getReduceFused(ops + step, chain, f) : runOp(ops[step], f)) || !be_.afterOp(f)) return f;
        step += chain - 1;
      }
    f.kind = FailureKind::None;
    return f;
  }

  // Sources one fused reduce may read: a chain's local sources and one per peer.
  static constexpr int kMaxFusedSources = 16;
  // Puts (and signals) of a reduced chunk that reduceThenPut takes along.
  static constexpr uint32_t kMaxTiledPuts = 16;

 private:
  struct Span {
    char* data;
    uint64_t bytes;
  };

  // Bytes of n chunks from ref, piece j, in a buffer of `size` bytes laid out by `offsets`.
  FORESTCC_HOST_DEVICE bool range(const plan::ChunkRef& ref, uint32_t j, uint32_t n, const uint64_t* offsets,
                                  uint64_t size, int peer, bool bank, uint64_t& begin, uint64_t& end, Failure& f) {
    const ElementRange first = chunkRange(ref.index + j, g_.count, g_.k, offsets, f.slice, g_.slices);
    const ElementRange last = n > 1 ? chunkRange(ref.index + j + n - 1, g_.count, g_.k, offsets, f.slice, g_.slices) : first;
    begin = first.begin * g_.elem;
    end = last.end * g_.elem;
    if (end <= size) return true;
    f.kind = FailureKind::OutOfRange;
    f.peer = peer;
    f.buffer = static_cast<uint8_t>(ref.buffer);
    f.bank = bank;
    f.a = begin, f.b = end, f.c = size;
    return false;
  }

  FORESTCC_HOST_DEVICE const uint64_t* localOffsets(plan::Buffer b) const { return g_.localOffsets[static_cast<int>(b)]; }

  FORESTCC_HOST_DEVICE bool local(const plan::ChunkRef& ref, uint32_t j, uint32_t n, Span& out, Failure& f) {
    const int b = static_cast<int>(ref.buffer);
    uint64_t begin, end;
    if (!range(ref, j, n, localOffsets(ref.buffer), g_.localBytes[b], -1, g_.eager && ref.buffer == plan::Buffer::Scratch,
               begin, end, f))
      return false;
    char* base = g_.local[b];
    if (g_.eager && ref.buffer == plan::Buffer::Scratch) base = be_.ownBank(base);
    out = {base + begin, end - begin};
    return true;
  }

  // A peer's span: its buffer of this call (or bank), the byte offset in it and the length.
  struct RemoteSpan {
    RemoteBuffer buffer;
    uint64_t offset;
    uint64_t bytes;
  };

  FORESTCC_HOST_DEVICE bool remote(const plan::Op& op, const plan::ChunkRef& ref, uint32_t j, uint32_t n, int peer,
                                   RemoteSpan& out, Failure& f) {
    const bool bank = g_.eager && ref.buffer == plan::Buffer::Scratch;
    if (bank) {
      if (!be_.bank(op.channel, out.buffer, f)) return false;
      out.buffer.bytes = g_.localBytes[static_cast<int>(plan::Buffer::Scratch)];  // same plan, same count
    } else if (!be_.remote(op.channel, ref.buffer, out.buffer, f)) {
      return false;
    }
    uint64_t begin, end;
    if (!range(ref, j, n, out.buffer.offsets, out.buffer.bytes, peer, bank, begin, end, f)) return false;
    out.offset = begin;
    out.bytes = end - begin;
    return true;
  }

  FORESTCC_HOST_DEVICE bool sizeMismatch(int peer, uint64_t mine, uint64_t theirs, uint8_t write, Failure& f) {
    f.kind = FailureKind::SizeMismatch;
    f.peer = peer;
    f.write = write;
    f.a = mine, f.b = theirs;
    return false;
  }

  // A piece count and span: sliced plans move one chunk per piece (each chunk's slice is its own
  // range); unsliced ones move the op's chunks as one contiguous span.
  FORESTCC_HOST_DEVICE uint32_t pieces(const plan::Op& op) const { return g_.slices == 1 ? 1 : op.count; }
  FORESTCC_HOST_DEVICE uint32_t span(const plan::Op& op) const { return g_.slices == 1 ? op.count : 1; }

  // A span of several chunks (an unsliced op) between two layouts, either laid out by offsets
  // (all_to_all_v's splits): whether every chunk has the same length in both, not just the span
  // (two blocks that disagree the opposite ways pass the total and land shifted, silently: a
  // relay's scratch is laid out by the senders' splits, the receiver's output by its own); else
  // the first unequal chunk's lengths in bytes.
  FORESTCC_HOST_DEVICE bool sameChunks(const plan::Op& op, const plan::ChunkRef& a, const uint64_t* offsetsA,
                                       const plan::ChunkRef& b, const uint64_t* offsetsB, uint32_t slice,
                                       uint64_t& bytesA, uint64_t& bytesB) const {
    if (span(op) == 1 || (!offsetsA && !offsetsB)) return true;  // equal chunks: equal totals are equal chunks
    for (uint32_t c = 0; c < op.count; ++c) {
      const ElementRange x = chunkRange(a.index + c, g_.count, g_.k, offsetsA, slice, g_.slices);
      const ElementRange y = chunkRange(b.index + c, g_.count, g_.k, offsetsB, slice, g_.slices);
      bytesA = (x.end - x.begin) * g_.elem, bytesB = (y.end - y.begin) * g_.elem;
      if (bytesA != bytesB) return false;
    }
    return true;
  }

  FORESTCC_HOST_DEVICE bool transfer(const plan::Op& op, const plan::ChunkRef& localRef, const plan::ChunkRef& remoteRef,
                                     bool write, int peer, Failure& f) {
    for (uint32_t j = 0; j < pieces(op); ++j) {
      Span here;
      RemoteSpan there;
      if (!local(localRef, j, span(op), here, f) || !remote(op, remoteRef, j, span(op), peer, there, f)) return false;
      if (there.bytes != here.bytes) return sizeMismatch(peer, here.bytes, there.bytes, write ? 1 : 0, f);
      uint64_t mine = 0, theirs = 0;
      if (!sameChunks(op, localRef, localOffsets(localRef.buffer), remoteRef, there.buffer.offsets, f.slice, mine, theirs))
        return sizeMismatch(peer, mine, theirs, write ? 1 : 0, f);
      if (!here.bytes) continue;
      if (there.buffer.mapped) {
        char* mapped = there.buffer.mapped + there.offset;
        if (write) be_.copy(mapped, here.data, here.bytes);
        else be_.copy(here.data, mapped, here.bytes);
      } else if (write ? !be_.write(op.channel, there.buffer, there.offset, here.data, here.bytes, f)
                       : !be_.read(op.channel, there.buffer, there.offset, here.data, here.bytes, f)) {
        return false;
      }
    }
    return true;
  }

  // The local destination and sources of a reduce op's piece j.
  FORESTCC_HOST_DEVICE bool reduceSpans(const plan::Op& op, uint32_t j, Span& dst, const char** srcs, Failure& f) {
    if (!local(op.dst, j, span(op), dst, f)) return false;
    for (int i = 0; i < op.sourceCount; ++i) {
      Span s;
      if (!local(op.sources[i], j, span(op), s, f)) return false;
      if (s.bytes != dst.bytes) {
        f.kind = FailureKind::UnequalChunks;
        f.a = dst.bytes, f.b = s.bytes;
        return false;
      }
      srcs[i] = s.data;
    }
    return true;
  }

  FORESTCC_HOST_DEVICE bool reduce(const plan::Op& op, Failure& f) {
    const char* srcs[plan::kMaxReduceSources + 1];
    for (uint32_t j = 0; j < pieces(op); ++j) {
      Span dst;
      if (!reduceSpans(op, j, dst, srcs, f)) return false;
      be_.reduce(dst.data, srcs, op.sourceCount, dst.bytes / g_.elem);
    }
    return true;
  }

  // get_reduce ops that each add one more peer's chunk into the same destination (a direct
  // all_reduce's reduce-scatter: dst = op(srcs, peer 1); dst = op(dst, peer 2); ...) read and
  // write dst once per peer. The length of such a chain starting at ops[step] (1: no chain); the
  // chain runs as one pass over every peer's chunk (getReduceFused), combining the operands in
  // the same order as the ops one after another. 16- and 8-bit floats, accumulated in float,
  // are rounded once for the chain instead of once per op (the result is at least as close);
  // every rank that reduces the same chunk through the same plan gets the same bits.
  FORESTCC_HOST_DEVICE uint32_t getReduceChain(const plan::Op* ops, uint32_t step, uint32_t n) const {
    const plan::Op& first = ops[step];
    if (first.code != plan::OpCode::GetReduce) return 1;
    auto same = [](const plan::ChunkRef& a, const plan::ChunkRef& b) {
      return a.buffer == b.buffer && a.index == b.index;
    };
    uint32_t len = 1;
    while (step + len < n && first.sourceCount + int(len) < kMaxFusedSources) {
      const plan::Op& next = ops[step + len];
      if (next.code != plan::OpCode::GetReduce || next.count != first.count || next.sourceCount != 1 ||
          !same(next.dst, first.dst) || !same(next.sources[0], first.dst))
        break;
      ++len;
    }
    return len;
  }

  // A chain of `len` get_reduce ops (getReduceChain) in one pass when every peer's chunk is mapped
  // and none overlaps the destination (checked for every piece before any is reduced); else op by op.
  FORESTCC_HOST_DEVICE bool getReduceFused(const plan::Op* ops, uint32_t len, Failure& f) {
    const uint32_t step = f.step;
    bool fusable = true;
    for (int pass = 0; pass < 2 && fusable; ++pass)  // 0: check every piece, 1: reduce
      for (uint32_t j = 0; j < pieces(ops[0]) && fusable; ++j) {
        Span dst;
        const char* srcs[kMaxFusedSources];
        f.step = step;
        if (!reduceSpans(ops[0], j, dst, srcs, f)) return false;
        int n = ops[0].sourceCount;
        for (uint32_t i = 0; i < len && fusable; ++i) {
          const int peer = be_.peerOf(ops[i].channel);
          RemoteSpan there;
          f.step = step + i;
          if (!remote(ops[i], ops[i].src, j, span(ops[i]), peer, there, f)) return false;
          if (there.bytes != dst.bytes) return sizeMismatch(peer, dst.bytes, there.bytes, 2, f);
          const char* p = there.buffer.mapped ? there.buffer.mapped + there.offset : nullptr;
          fusable = p && (p + there.bytes <= dst.data || dst.data + dst.bytes <= p);
          srcs[n++] = p;
        }
        if (pass == 1 && dst.bytes) be_.reduce(dst.data, srcs, n, dst.bytes / g_.elem);
      }
    f.step = step;
    if (fusable) return true;
    for (uint32_t i = 0; i < len; ++i) {
      f.step = step + i;
      if (!runOp(ops[i], f) || (i + 1 < len && !be_.afterOp(f))) return false;
    }
    f.step = step;
    return true;
  }

  // dst = op(local sources..., the peer's src) in one pass.
  FORESTCC_HOST_DEVICE bool getReduce(const plan::Op& op, int peer, Failure& f) {
    const char* srcs[plan::kMaxReduceSources + 1];
    for (uint32_t j = 0; j < pieces(op); ++j) {
      Span dst;
      RemoteSpan there;
      if (!reduceSpans(op, j, dst, srcs, f) || !remote(op, op.src, j, span(op), peer, there, f)) return false;
      if (there.bytes != dst.bytes) return sizeMismatch(peer, dst.bytes, there.bytes, 2, f);
      if (!dst.bytes) continue;
      if (there.buffer.mapped) {
        srcs[op.sourceCount] = there.buffer.mapped + there.offset;
        be_.reduce(dst.data, srcs, op.sourceCount + 1, dst.bytes / g_.elem);
      } else if (!be_.readReduce(op.channel, there.buffer, there.offset, dst.data, srcs, op.sourceCount, dst.bytes, f)) {
        return false;
      }
    }
    return true;
  }

  // The ops after a get_reduce chain at ops[step, step + chain) that put its result to peers: puts
  // of exactly the chain's destination, and the signals between them (a direct all_reduce's second
  // step, a direct reduce's put to the root). 0 when the chain is not followed by such a put.
  FORESTCC_HOST_DEVICE uint32_t putsOfResult(const plan::Op* ops, uint32_t step, uint32_t chain, uint32_t n) const {
    const plan::Op& first = ops[step];
    if (first.code != plan::OpCode::GetReduce) return 0;
    uint32_t len = 0, puts = 0;
    for (uint32_t i = step + chain; i < n && len < kMaxTiledPuts; ++i, ++len) {
      const plan::Op& op = ops[i];
      if (op.code == plan::OpCode::Signal) continue;
      if ((op.code != plan::OpCode::Put && op.code != plan::OpCode::PutSignal) || op.count != first.count ||
          op.src.buffer != first.dst.buffer || op.src.index != first.dst.index)
        break;
      ++puts;
    }
    // Trailing signals stay with the ops after the group.
    while (len > 0 && ops[step + chain + len - 1].code == plan::OpCode::Signal) --len;
    return puts ? len : 0;
  }

  static FORESTCC_HOST_DEVICE bool disjoint(uint64_t a, uint64_t aBytes, uint64_t b, uint64_t bBytes) {
    return a + aBytes <= b || b + bBytes <= a;
  }

  // A get_reduce chain and the puts of its result (ops[0, chain) and ops[chain, len): putsOfResult)
  // tile by tile: each tile is reduced from every peer and put to every peer while it is in cache.
  // This is what slicing a direct all_reduce did, without a slice's handshake with every peer (on a
  // loaded or oversubscribed CPU each handshake waits for a peer that is not running). The result
  // is the ops' own: a chain reduces in the same order (one pass when every peer is mapped, as
  // getReduceFused, else op by op per tile), and moving a put's writes before the chain's later
  // reads is safe when no put lands on bytes a get of the group still reads: every peer range a put
  // writes is checked to be the very range a get reads there (a tile is read before it is written)
  // or apart from all of them, and apart from this rank's own operands. Otherwise `tiled` stays
  // false and the ops run one by one. Signals go out after every tile, in the ops' order.
  FORESTCC_HOST_DEVICE bool reduceThenPut(const plan::Op* ops, uint32_t chain, uint32_t len, Failure& f, bool& tiled) {
    const plan::Op& first = ops[0];
    if (pieces(first) != 1) return true;
    const uint32_t step = f.step;
    Span dst;
    const char* srcs[kMaxFusedSources];
    RemoteSpan from[kMaxFusedSources], to[kMaxTiledPuts];
    int fromPeer[kMaxFusedSources], toPeer[kMaxTiledPuts];
    uint32_t toStep[kMaxTiledPuts], puts = 0;
    if (first.sourceCount + int(chain) > kMaxFusedSources) return true;
    if (!reduceSpans(first, 0, dst, srcs, f)) return false;
    uint64_t tile = ~uint64_t(0);
    bool mapped = true;
    for (uint32_t i = 0; i < len; ++i) {
      const plan::Op& op = ops[i];
      f.step = step + i;
      if (op.code == plan::OpCode::Signal) continue;
      const bool get = i < chain;
      const int peer = be_.peerOf(op.channel);
      RemoteSpan& there = get ? from[i] : to[puts];
      if (!remote(op, get ? op.src : op.dst, 0, span(op), peer, there, f)) return false;
      if (there.bytes != dst.bytes) return sizeMismatch(peer, dst.bytes, there.bytes, get ? 2 : 1, f);
      const uint64_t t = be_.tileBytes(op.channel, there.buffer);
      if (!t) return true;
      tile = t < tile ? t : tile;
      if (there.buffer.mapped) {
        const char* p = there.buffer.mapped + there.offset;
        if (!disjoint(uint64_t(p), there.bytes, uint64_t(dst.data), dst.bytes)) return true;
        for (int s = 0; s < first.sourceCount && !get; ++s)
          if (!disjoint(uint64_t(p), there.bytes, uint64_t(srcs[s]), dst.bytes)) return true;
      } else if (get) {
        mapped = false;
      }
      if (get) {
        fromPeer[i] = peer;
      } else {
        toPeer[puts] = peer;
        toStep[puts++] = step + i;
      }
    }
    for (uint32_t k = 0; k < puts; ++k)
      for (uint32_t i = 0; i < chain; ++i) {
        if (toPeer[k] != fromPeer[i]) continue;
        const RemoteBuffer &x = to[k].buffer, &y = from[i].buffer;
        if (!x.mapped != !y.mapped) return true;  // one address space to compare them in
        const uint64_t a = (x.mapped ? uint64_t(x.mapped) : be_.ownerAddress(x)) + to[k].offset;
        const uint64_t b = (y.mapped ? uint64_t(y.mapped) : be_.ownerAddress(y)) + from[i].offset;
        if (a != b && !disjoint(a, dst.bytes, b, dst.bytes)) return true;
      }
    tiled = true;
    tile = tile / g_.elem * g_.elem;
    if (!tile) tile = g_.elem;
    for (uint64_t off = 0; off < dst.bytes; off += tile) {
      const uint64_t bytes = dst.bytes - off < tile ? dst.bytes - off : tile;
      char* out = dst.data + off;
      const char* operands[kMaxFusedSources];
      int n = first.sourceCount;
      for (int s = 0; s < n; ++s) operands[s] = srcs[s] + off;
      if (mapped) {  // one pass over every peer's tile, as getReduceFused
        for (uint32_t i = 0; i < chain; ++i) operands[n++] = from[i].buffer.mapped + from[i].offset + off;
        be_.reduce(out, operands, n, bytes / g_.elem);
      } else {
        for (uint32_t i = 0; i < chain; ++i) {
          f.step = step + i;
          if (i > 0) operands[0] = out, n = 1;
          if (from[i].buffer.mapped) {
            operands[n] = from[i].buffer.mapped + from[i].offset + off;
            be_.reduce(out, operands, n + 1, bytes / g_.elem);
          } else if (!be_.readReduce(ops[i].channel, from[i].buffer, from[i].offset + off, out, operands, n, bytes, f)) {
            return false;
          }
        }
      }
      for (uint32_t k = 0; k < puts; ++k) {
        f.step = toStep[k];
        const plan::Op& op = ops[toStep[k] - step];
        if (to[k].buffer.mapped) be_.copy(to[k].buffer.mapped + to[k].offset + off, out, bytes);
        else if (!be_.write(op.channel, to[k].buffer, to[k].offset + off, out, bytes, f)) return false;
      }
    }
    for (uint32_t i = chain; i < len; ++i)
      if (ops[i].code == plan::OpCode::Signal || ops[i].code == plan::OpCode::PutSignal) be_.signal(ops[i].channel);
    f.step = step;
    return true;
  }

  FORESTCC_HOST_DEVICE bool copy(const plan::Op& op, Failure& f) {
    for (uint32_t j = 0; j < pieces(op); ++j) {
      Span dst, src;
      if (!local(op.dst, j, span(op), dst, f) || !local(op.src, j, span(op), src, f)) return false;
      // Equal for every plan on equal blocks; all_to_all_v's blocks differ, and a copy between
      // two of different sizes is the plan's error (or the caller's splits'), not a truncation.
      uint64_t dstChunk = dst.bytes, srcChunk = src.bytes;
      if (dst.bytes != src.bytes ||
          !sameChunks(op, op.dst, localOffsets(op.dst.buffer), op.src, localOffsets(op.src.buffer), f.slice, dstChunk,
                      srcChunk)) {
        f.kind = FailureKind::UnequalChunks;
        f.a = srcChunk, f.b = dstChunk;
        return false;
      }
      const uint64_t n = dst.bytes;
      if (!n || dst.data == src.data) continue;
      if (dst.data + n <= src.data || src.data + n <= dst.data) be_.copy(dst.data, src.data, n);
      else be_.move(dst.data, src.data, n);
    }
    return true;
  }

  // A put_signal of a call with packets: its data as packets into the peer's bank, no signal.
  // Eager plans are not sliced (packet_plan.cpp): the op's chunks are one span.
  FORESTCC_HOST_DEVICE bool putPackets(const plan::Op& op, int peer, Failure& f) {
    Span here;
    RemoteSpan there;
    if (!local(op.src, 0, op.count, here, f) || !remote(op, op.dst, 0, op.count, peer, there, f)) return false;
    if (there.bytes != here.bytes) return sizeMismatch(peer, here.bytes, there.bytes, 1, f);
    const uint64_t at = g_.packetBase + kPacketBytes * packetSlot(there.offset, op.dst.index);
    return be_.putPackets(op.channel, there.buffer, at, here.data, here.bytes, f);
  }

  // A wait of a call with packets: the packets of the peer's matching put_signal (the op's dst
  // and count, packet_plan.cpp), unpacked where that put would have written them.
  FORESTCC_HOST_DEVICE bool awaitPackets(const plan::Op& op, Failure& f) {
    constexpr int kScratch = static_cast<int>(plan::Buffer::Scratch);
    uint64_t begin, end;
    if (!range(op.dst, 0, op.count, nullptr, g_.localBytes[kScratch], -1, true, begin, end, f)) return false;
    char* bank = be_.ownBank(g_.local[kScratch]);
    return be_.awaitPackets(op.channel, bank + g_.packetBase + kPacketBytes * packetSlot(begin, op.dst.index),
                            bank + begin, end - begin, f);
  }

  // One handler per op; memory ordering per op: schedules/README.md, "Memory ordering".
  FORESTCC_HOST_DEVICE bool runOp(const plan::Op& op, Failure& f) {
    const int peer = op.code == plan::OpCode::Copy || op.code == plan::OpCode::Reduce ? -1 : be_.peerOf(op.channel);
    switch (op.code) {
      case plan::OpCode::Put: return transfer(op, op.src, op.dst, true, peer, f);
      case plan::OpCode::Get: return transfer(op, op.dst, op.src, false, peer, f);
      case plan::OpCode::PutSignal:
        if (g_.packets) return putPackets(op, peer, f);
        if (!transfer(op, op.src, op.dst, true, peer, f)) return false;
        be_.signal(op.channel);
        return true;
      case plan::OpCode::Signal: be_.signal(op.channel); return true;
      case plan::OpCode::Wait:
        if (g_.packets && op.sourceCount == kPacketWait) return awaitPackets(op, f);
        return be_.wait(op.channel, f);
      case plan::OpCode::Flush: be_.flush(op.channel); return true;
      case plan::OpCode::Copy: return copy(op, f);
      case plan::OpCode::Reduce: return reduce(op, f);
      case plan::OpCode::ReducePut: return reduce(op, f) && transfer(op, op.dst, op.remote, true, peer, f);
      case plan::OpCode::GetReduce: return getReduce(op, peer, f);
    }
    f.kind = FailureKind::Unsupported;
    return false;
  }

  const CallGeometry& g_;
  Backend& be_;
};

}  // namespace forestcc::executor
