#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
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

bool have_hw() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#else
bool have_hw() { return false; }
#endif

uint32_t update(uint32_t c, const unsigned char* p, size_t n) {
#if defined(__x86_64__)
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
  if (have_hw())
    for (; i + 3 <= pages && (i + 3) * page_bytes <= n; i += 3) hw_three(p + i * page_bytes, page_bytes, out + i);
#endif
  for (; i < pages; ++i) {
    const size_t begin = i * page_bytes;
    const size_t len = n - begin < page_bytes ? n - begin : page_bytes;
    out[i] = crc32c(p + begin, len);
  }
}

}  // namespace dt
