#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#endif

namespace dt {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: kTable[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};
constexpr Tables kTables;

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The raw (not inverted) CRC state over n bytes, with tables.
uint32_t table_update(uint32_t c, const unsigned char* p, size_t n) {
  const auto& t = kTables.t;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = load64(p) ^ c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t hw_update(uint32_t c, const unsigned char* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = uint32_t(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

// Three equal pages at once: three independent dependency chains keep the CRC unit busy.
__attribute__((target("sse4.2"))) void hw_three(const unsigned char* p, size_t page, uint32_t* out) {
  uint64_t a = 0xFFFFFFFFu, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
  const unsigned char* pa = p;
  const unsigned char* pb = p + page;
  const unsigned char* pc = p + 2 * page;
  size_t i = 0;
  for (; i + 8 <= page; i += 8) {
    a = _mm_crc32_u64(a, load64(pa + i));
    b = _mm_crc32_u64(b, load64(pb + i));
    c = _mm_crc32_u64(c, load64(pc + i));
  }
  uint32_t a32 = uint32_t(a), b32 = uint32_t(b), c32 = uint32_t(c);
  for (; i < page; ++i) {
    a32 = _mm_crc32_u8(a32, pa[i]);
    b32 = _mm_crc32_u8(b32, pb[i]);
    c32 = _mm_crc32_u8(c32, pc[i]);
  }
  out[0] = ~a32;
  out[1] = ~b32;
  out[2] = ~c32;
}

// Note [CRC-32C by carry-less multiplication]
// The CRC instruction takes 8 bytes a cycle at best (three chains), which made checking a checkpoint's pages cost
// as much as reading them from the page cache. With AVX-512 VPCLMULQDQ the bytes are folded instead, 256 a step:
// four 512-bit accumulators, each of four 128-bit lanes, hold the message so far as a polynomial congruent to it
// modulo P. Moving a 128-bit lane forward by D bits multiplies its two halves by x^(D+32) and x^(D-32) mod P
// (reflected, shifted left by one: Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"), which
// fold_constant computes. At the end the accumulators fold into one 128-bit value V, and the CRC of the message is
// the CRC instruction's over the 16 bytes of V from state 0; the tail (under 256 bytes) continues with it.
constexpr uint64_t fold_constant(int e) {
  uint64_t r = 1;  // x^e mod P, unreflected (P = 0x1EDC6F41 with its x^32)
  for (int i = 0; i < e; ++i) {
    r <<= 1;
    if (r & (uint64_t(1) << 32)) r ^= (uint64_t(1) << 32) | 0x1EDC6F41u;
  }
  uint64_t reflected = 0;
  for (int i = 0; i < 32; ++i)
    if (r & (uint64_t(1) << i)) reflected |= uint64_t(1) << (31 - i);
  return reflected << 1;
}
static_assert(fold_constant(544) == 0x740eef02u && fold_constant(480) == 0x9e4addf8u);

constexpr size_t kFoldMin = 256;  // bytes; shorter runs use the CRC instruction

__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))) __m512i fold512(__m512i x, __m512i k,
                                                                                     __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96);  // a ^ b ^ c
}

__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))) __m128i fold128(__m128i x, uint64_t k_lo,
                                                                                     uint64_t k_hi) {
  const __m128i k = _mm_set_epi64x(int64_t(k_hi), int64_t(k_lo));
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

// The raw CRC state over n >= kFoldMin bytes (Note [CRC-32C by carry-less multiplication]).
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))) uint32_t fold_update(uint32_t c,
                                                                                          const unsigned char* p,
                                                                                          size_t n) {
  // Per 128-bit lane: the low half moves by x^(D+32), the high half by x^(D-32), for D = 2048 and 512 bits.
  constexpr int64_t a_lo = int64_t(fold_constant(2080)), a_hi = int64_t(fold_constant(2016));
  constexpr int64_t b_lo = int64_t(fold_constant(544)), b_hi = int64_t(fold_constant(480));
  constexpr uint64_t k384_lo = fold_constant(416), k384_hi = fold_constant(352);
  constexpr uint64_t k256_lo = fold_constant(288), k256_hi = fold_constant(224);
  constexpr uint64_t k128_lo = fold_constant(160), k128_hi = fold_constant(96);
  const __m512i k2048 = _mm512_set_epi64(a_hi, a_lo, a_hi, a_lo, a_hi, a_lo, a_hi, a_lo);
  const __m512i k512 = _mm512_set_epi64(b_hi, b_lo, b_hi, b_lo, b_hi, b_lo, b_hi, b_lo);
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(int(c))));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  p += kFoldMin;
  n -= kFoldMin;
  for (; n >= kFoldMin; p += kFoldMin, n -= kFoldMin) {
    x0 = fold512(x0, k2048, _mm512_loadu_si512(p));
    x1 = fold512(x1, k2048, _mm512_loadu_si512(p + 64));
    x2 = fold512(x2, k2048, _mm512_loadu_si512(p + 128));
    x3 = fold512(x3, k2048, _mm512_loadu_si512(p + 192));
  }
  alignas(64) __m128i lane[4];  // the last 64 bytes' lanes, stored: GCC 12 warns wrongly on the lane extracts
  _mm512_store_si512(lane, fold512(fold512(fold512(x0, k512, x1), k512, x2), k512, x3));
  __m128i v = _mm_xor_si128(fold128(lane[0], k384_lo, k384_hi), fold128(lane[1], k256_lo, k256_hi));
  v = _mm_xor_si128(v, _mm_xor_si128(fold128(lane[2], k128_lo, k128_hi), lane[3]));
  uint64_t s = _mm_crc32_u64(0, uint64_t(_mm_cvtsi128_si64(v)));
  s = _mm_crc32_u64(s, uint64_t(_mm_extract_epi64(v, 1)));
  return hw_update(uint32_t(s), p, n);
}

bool have_hw() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}

bool have_fold() {
  static const bool yes = have_hw() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq");
  return yes;
}
#else
bool have_hw() { return false; }
#endif

uint32_t update(uint32_t c, const unsigned char* p, size_t n) {
#if defined(__x86_64__)
  if (n >= kFoldMin && have_fold()) return fold_update(c, p, n);
  if (have_hw()) return hw_update(c, p, n);
#endif
  return table_update(c, p, n);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  return ~update(~crc, static_cast<const unsigned char*>(data), n);
}

size_t page_count(size_t n, size_t page_bytes) { return page_bytes == 0 ? 0 : (n + page_bytes - 1) / page_bytes; }

void crc32c_pages(const void* data, size_t n, size_t page_bytes, uint32_t* out) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t pages = page_count(n, page_bytes);
  size_t i = 0;
#if defined(__x86_64__)
  if (have_hw() && !(have_fold() && page_bytes >= kFoldMin))
    for (; i + 3 <= pages && (i + 3) * page_bytes <= n; i += 3) hw_three(p + i * page_bytes, page_bytes, out + i);
#endif
  for (; i < pages; ++i) {
    const size_t begin = i * page_bytes;
    const size_t len = n - begin < page_bytes ? n - begin : page_bytes;
    out[i] = crc32c(p + begin, len);
  }
}

}  // namespace dt
