#include "kernels/cpu/stream_copy.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>
#define DT_HAVE_STREAM_STORES 1
#endif

namespace dt::kernels::cpu {

void stream_copy(void* dst, const void* src, size_t n) {
#ifdef DT_HAVE_STREAM_STORES
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Head: up to the destination's next 16-byte boundary.
  const size_t head = std::min(n, size_t((16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

void stream_fence() {
#ifdef DT_HAVE_STREAM_STORES
  _mm_sfence();
#endif
}

void large_copy(void* dst, const void* src, size_t n) {
  if (n < kStreamMinBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  stream_copy(dst, src, n);
  stream_fence();
}

}  // namespace dt::kernels::cpu
