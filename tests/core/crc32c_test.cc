// CRC-32C against the published check value and a bit-at-a-time reference on random data of every length class.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace dt {
namespace {

// The definition, one bit at a time (independent of the tables and the instruction).
uint32_t reference(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0);
  }
  return ~c;
}

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(Crc32c, CheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(s, 0), 0u);
}

TEST(Crc32c, MatchesTheDefinitionAndExtends) {
  // From 256 bytes the CPU may fold by carry-less multiplication (Note [CRC-32C by carry-less multiplication]).
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 255u, 256u, 257u, 511u, 512u, 1000u, 4097u, 70001u}) {
    const auto v = random_bytes(n, uint32_t(n));
    EXPECT_EQ(crc32c(v.data(), n), reference(v.data(), n)) << n;
    for (size_t split : {size_t(0), n / 3, n}) {
      const uint32_t head = crc32c(v.data(), split);
      EXPECT_EQ(crc32c(v.data() + split, n - split, head), reference(v.data(), n)) << n << " split " << split;
    }
  }
}

TEST(Crc32c, PagesAreIndependentChecksums) {
  for (size_t page : {size_t(1), size_t(13), size_t(64), size_t(256), size_t(4096)}) {
    for (size_t n : {size_t(0), page - 1, page, 3 * page, 3 * page + 5, 7 * page + 1, 10 * page}) {
      const auto v = random_bytes(n, uint32_t(n + page));
      const size_t pages = page_count(n, page);
      EXPECT_EQ(pages, (n + page - 1) / page);
      std::vector<uint32_t> out(pages + 1, 0xDEADBEEFu);
      crc32c_pages(v.data(), n, page, out.data());
      for (size_t i = 0; i < pages; ++i) {
        const size_t len = std::min(page, n - i * page);
        EXPECT_EQ(out[i], reference(v.data() + i * page, len)) << "page " << i << " of " << n << " / " << page;
      }
      EXPECT_EQ(out[pages], 0xDEADBEEFu) << "nothing written past the last page";
    }
  }
}

}  // namespace
}  // namespace dt
