#include "executor/copy_kernels.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace forestcc::executor {

namespace {

// Below this a streamed copy saves too little to pay for the fence and the cold destination.
constexpr size_t kMinStreamingBytes = 64 << 10;

// SSE2 streaming stores (part of x86-64): as fast as wider ones here, since the copy is bound by
// memory bandwidth, and available on every CPU the library is built for.
void streamCopy(char* dst, const char* src, size_t bytes) {
  // Align the destination to 64 bytes with an ordinary copy of the head.
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const size_t body = bytes & ~size_t(63);
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + body, src + body, bytes - body);
  _mm_sfence();
}

}  // namespace

void copyBytes(void* dst, const void* src, size_t bytes, bool streaming) {
  if (streaming && bytes >= kMinStreamingBytes)
    streamCopy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  else
    std::memcpy(dst, src, bytes);
}

}  // namespace forestcc::executor
