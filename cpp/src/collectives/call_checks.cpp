#include "collectives/call_checks.hpp"

#include <algorithm>
#include <string>

#include "forestcc/error.hpp"

namespace forestcc::collectives {

namespace {

using plan::Blocks;
using plan::Collective;
using plan::RootOnly;

[[noreturn]] void invalid(const std::string& message, int rank) {
  throw Error(ErrorCode::InvalidUsage, message, rank);
}

std::string elements(uint64_t n) { return std::to_string(n) + (n == 1 ? " element" : " elements"); }

[[noreturn]] void sizeError(const char* arg, uint64_t got, uint64_t want, const std::string& because, int rank) {
  invalid(std::string(arg) + ": has " + elements(got) + ", expected " + elements(want) + " (" + because + ")", rank);
}

// A buffer's dtype, pointer and size (a C++ caller's values may be anything).
void checkTensor(const Tensor& t, const char* arg, int rank) {
  if (!valid(t.dtype))
    throw Error(ErrorCode::InvalidType, std::string(arg) + ": dtype " + std::to_string(static_cast<int>(t.dtype)) +
                                            " is not a forestcc::DataType", rank);
  // (A C++ caller's; the bindings and the shim never pass one.)
  if (!t.data && t.count) invalid(std::string(arg) + ": is NULL with " + elements(t.count), rank);
  if (!fitsInMemory(t.count, elementSize(t.dtype)))
    invalid(std::string(arg) + ": " + elements(t.count) + " of " + name(t.dtype) +
                " is more memory than a process can address", rank);
}

// a * b, or a refusal naming what was multiplied when it would wrap around 64 bits.
uint64_t blocksOf(uint64_t block, uint64_t blocks, const char* what, int rank) {
  uint64_t total;
  if (__builtin_mul_overflow(block, blocks, &total))
    invalid(std::string(what) + " times " + std::to_string(blocks) + " ranks is more than 2**64", rank);
  return total;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  const size_t an = a.bytes(), bn = b.bytes();
  return an && bn && a0 < b0 + bn && b0 < a0 + an;
}

// Split sizes of all_to_all_v: one per rank, whose sum (`total`) fits in 64 bits; a sum that
// wrapped around would pass the size check with a wrong layout.
uint64_t splitTotal(const std::vector<uint64_t>& splits, const char* arg, int nranks, int rank) {
  if (static_cast<int>(splits.size()) != nranks)
    invalid(std::string(arg) + ": has " + std::to_string(splits.size()) + " entries, expected one per rank (" +
                std::to_string(nranks) + ")", rank);
  uint64_t total = 0;
  for (uint64_t s : splits)
    if (__builtin_add_overflow(total, s, &total))
      invalid(std::string(arg) + ": the split sizes add up to more than 2**64 elements", rank);
  return total;
}

// The buffers of all_to_all_v: out of place, blocks packed in rank order.
void checkVariable(const CallRequest& r, int rank, int nranks, CheckedCall& out) {
  if (out.inPlace) invalid("out: all_to_all_v is out of place; pass an out that does not overlap x", rank);
  const uint64_t inTotal = splitTotal(r.inSplits, "in_splits", nranks, rank);
  const uint64_t outTotal = splitTotal(r.outSplits, "out_splits", nranks, rank);
  if (inTotal != r.x.count) sizeError("x", r.x.count, inTotal, "the sum of in_splits", rank);
  if (outTotal != r.out.count) sizeError("out", r.out.count, outTotal, "the sum of out_splits", rank);
  out.buffers.count = 0;
  out.buffers.inCounts = r.inSplits;
  out.buffers.outCounts = r.outSplits;
}

}  // namespace

int checkRank(int64_t value, const char* arg, int nranks) {
  if (value < 0 || value >= nranks)
    throw Error(ErrorCode::InvalidUsage, std::string(arg) + ": " + std::to_string(value) +
                                             " is out of range: must be a rank in [0, " + std::to_string(nranks) + ")");
  return static_cast<int>(value);
}

void checkBatchBuffers(const std::vector<SendMessage>& sends, const std::vector<RecvMessage>& recvs, int rank) {
  if (recvs.empty() || sends.size() + recvs.size() < 2) return;
  struct Span {
    uintptr_t begin, end;
    bool recv;
    size_t index;
    std::string name() const { return std::string(recv ? "recvs[" : "sends[") + std::to_string(index) + "]"; }
  };
  std::vector<Span> spans;
  spans.reserve(sends.size() + recvs.size());
  for (size_t i = 0; i < sends.size(); ++i)
    if (sends[i].bytes) {
      const auto p = reinterpret_cast<uintptr_t>(sends[i].data);
      spans.push_back({p, p + sends[i].bytes, false, i});
    }
  for (size_t i = 0; i < recvs.size(); ++i)
    if (recvs[i].bytes) {
      const auto p = reinterpret_cast<uintptr_t>(recvs[i].data);
      spans.push_back({p, p + recvs[i].bytes, true, i});
    }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // In order of their starts, a span overlaps an earlier one when it starts before the furthest
  // end so far: of any span, for a receive; of a receive, for a send.
  const Span* furthest = nullptr;
  const Span* furthestRecv = nullptr;
  for (const Span& s : spans) {
    const Span* hit = s.recv ? furthest : furthestRecv;
    if (hit && s.begin < hit->end)
      invalid(s.name() + ": its buffer overlaps " + hit->name() + "'s in the same batch (a batch's messages move at "
                         "once, in no set order); pass receive buffers that overlap no other buffer of the batch",
              rank);
    if (!furthest || s.end > furthest->end) furthest = &s;
    if (s.recv && (!furthestRecv || s.end > furthestRecv->end)) furthestRecv = &s;
  }
}

void checkCall(const CallRequest& r, int rank, int nranks, CheckedCall& out) {
  const Collective c = r.collective;
  const plan::CollectiveTraits& t = plan::traits(c);
  if (c == Collective::SendRecv) invalid("collective: sendrecv is a plan collective; use send() and recv()", rank);
  if (r.variable && c != Collective::AllToAll) invalid("collective: only all_to_all has a variable form", rank);
  out.root = t.rooted ? checkRank(r.root, "root", nranks) : -1;
  CallBuffers& b = out.buffers;
  if (t.reduces && !valid(r.op))
    invalid("op: " + std::to_string(static_cast<int>(r.op)) + " is not a forestcc::ReduceOp", rank);
  b.op = t.reduces ? r.op : ReduceOp::Sum;
  b.preMultiplied = t.reduces && r.options.preMultiplied;
  const bool isRoot = rank == out.root;
  const bool hasX = t.input != Blocks::None && !(t.rootOnly == RootOnly::Input && !isRoot);
  const bool hasOut = t.output != Blocks::None && !(t.rootOnly == RootOnly::Output && !isRoot);
  if (hasX && !r.x.present) invalid("x: this rank must pass an input buffer", rank);
  if (hasOut && !r.out.present) invalid("out: this rank must pass an output buffer", rank);
  out.standIn = t.input != Blocks::None && !hasX     ? Engine::StandIn::Input
                : t.output != Blocks::None && !hasOut ? Engine::StandIn::Output
                                                      : Engine::StandIn::None;
  if (!hasX && !hasOut) return;  // a barrier
  if (hasX) checkTensor(r.x, "x", rank);
  if (hasOut) checkTensor(r.out, "out", rank);

  if (hasX && hasOut && r.x.dtype != r.out.dtype)
    throw Error(ErrorCode::InvalidType, std::string("out: dtype ") + name(r.out.dtype) + " does not match x's " +
                                            name(r.x.dtype), rank);
  // The block count comes from the buffer of one block (x first); all_to_all divides x.
  const Tensor& ref = hasX && t.input == Blocks::One ? r.x : hasOut && t.output == Blocks::One ? r.out : r.x;
  const bool refIsX = &ref == &r.x;
  const uint64_t n = static_cast<uint64_t>(nranks);
  const bool sameBlocks = t.input == t.output;
  const bool perRank = sameBlocks && t.input == Blocks::PerRank;  // all_to_all

  auto checkOverlap = [&] {
    // Empty buffers are never in place: their data pointers say nothing (torch.empty(0) has
    // none), and ranks must agree on the placement, which is part of the plan.
    if (sameBlocks) {
      out.inPlace = t.inPlace && r.out.data == r.x.data && r.x.bytes();
      if (!out.inPlace && overlaps(r.x, r.out)) invalid("out: overlaps x without being the same memory", rank);
      return;
    }
    // The smaller buffer may be the larger one's block number rank.
    const Tensor& small = t.input == Blocks::One ? r.x : r.out;
    const Tensor& large = t.input == Blocks::One ? r.out : r.x;
    const char* mine = static_cast<const char*>(large.data) + static_cast<size_t>(rank) * small.bytes();
    out.inPlace = t.inPlace && small.data == mine && small.bytes();
    if (!out.inPlace && overlaps(r.x, r.out)) {
      const char* smallName = &small == &r.x ? "x" : "out";
      const char* largeName = &small == &r.x ? "out" : "x";
      invalid(t.inPlace ? std::string("out: overlaps x other than as its block for this rank (in place, ") + smallName +
                              " must be " + largeName + "'s block number rank)"
                        : std::string("out: overlaps x; ") + t.name + " is out of place", rank);
    }
  };

  if (hasX && hasOut) {
    if (perRank) {
      checkOverlap();
      if (r.variable) {
        checkVariable(r, rank, nranks, out);
      } else {
        if (r.out.count != r.x.count) sizeError("out", r.out.count, r.x.count, "the size of x", rank);
        if (r.x.count % n)
          invalid("x: has " + elements(r.x.count) + ", which does not divide into " + std::to_string(nranks) +
                      " equal blocks (one per rank); use all_to_all_v for uneven splits", rank);
        b.count = r.x.count / n;
      }
    } else {
      const Tensor& other = refIsX ? r.out : r.x;
      const uint64_t want = sameBlocks ? ref.count : blocksOf(ref.count, n, refIsX ? "x's size" : "out's size", rank);
      if (other.count != want)
        sizeError(refIsX ? "out" : "x", other.count, want,
                  sameBlocks ? std::string("the size of x")
                             : std::string("the size of ") + (refIsX ? "x" : "out") + " times " +
                                   std::to_string(nranks) + " ranks", rank);
      checkOverlap();
      b.count = ref.count;
    }
  } else {
    b.count = ref.count;  // one buffer (a rank away from the root): it defines the call
  }
  b.dtype = ref.dtype;
  const size_t block = static_cast<size_t>(b.count) * elementSize(b.dtype);  // the present buffer fits
  b.input = const_cast<void*>(r.x.data);
  b.inputBytes = hasX ? r.x.bytes() : blocksOf(block, plan::blocks(t.input, nranks), "the root's block", rank);
  b.output = const_cast<void*>(r.out.data);
  b.outputBytes = hasOut ? r.out.bytes() : blocksOf(block, plan::blocks(t.output, nranks), "the root's block", rank);
  if (!hasX) b.input = nullptr;
  if (!hasOut) b.output = nullptr;
}

}  // namespace forestcc::collectives
