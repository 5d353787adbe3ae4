#include "core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/reduce_op.h"

namespace dt {
namespace {

// Reference decoding of binary16 from its definition.
double ref_half_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  if (e == 31) v = m ? NAN : INFINITY;
  return sign ? -v : v;
}
double ref_bf16_value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even reference: nearest representable among the sorted finite positives, ties to even bits,
// overflow to infinity past the midpoint between the largest finite value and the next power of two.
template <typename Decode>
uint16_t ref_round(float f, uint16_t max_finite, double overflow_at, Decode decode) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(double(f));
  if (a >= overflow_at) return sign | uint16_t(max_finite + 1);  // infinity's bits follow the max finite
  uint16_t lo = 0, hi = max_finite;
  while (lo < hi) {  // largest bits with value <= a
    uint16_t mid = uint16_t((lo + hi + 1) / 2);
    if (decode(mid) <= a)
      lo = mid;
    else
      hi = uint16_t(mid - 1);
  }
  if (decode(lo) == a || lo == max_finite) return sign | lo;
  double dl = a - decode(lo), du = decode(uint16_t(lo + 1)) - a;
  if (dl < du) return sign | lo;
  if (du < dl) return sign | uint16_t(lo + 1);
  return sign | ((lo & 1) ? uint16_t(lo + 1) : lo);
}

TEST(DType, TableIsConsistent) {
  EXPECT_EQ(kNumDTypes, 9);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::b8), 1u);
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
    EXPECT_EQ(dtype_from_name(dtype_long_name(t)), t);
    size_t sz = dispatch_dtype(t, [&]<typename T>() { return sizeof(T); });
    EXPECT_EQ(sz, dtype_size(t));
  }
  EXPECT_STREQ(dtype_long_name(DType::bf16), "bfloat16");  // PyTorch's names
  EXPECT_STREQ(dtype_long_name(DType::b8), "bool");
  EXPECT_EQ(dtype_from_name("half"), DType::f16);
  EXPECT_TRUE(is_floating(DType::f16));
  EXPECT_FALSE(is_floating(DType::i32));
  try {
    dtype_from_name("f8");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'f8'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("f32, f64, f16, bf16, i8, i32, i64, u8, bool"), std::string::npos) << e.what();
  }
  EXPECT_EQ(reduce_op_from_name("prod"), ReduceOp::kProduct);
  EXPECT_THROW(reduce_op_from_name("xor"), InvalidArgument);
}

TEST(Half, DecodesEveryBitPatternExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    double ref = ref_half_value(uint16_t(b));
    float got = Half::from_bits(uint16_t(b));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(double(got), ref) << "bits " << b;
      // and every finite/infinite value encodes back to the same bits
      ASSERT_EQ(Half(got).bits, b) << "bits " << b;
    }
  }
}

TEST(BFloat16, RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float got = BFloat16::from_bits(uint16_t(b));
    if (std::isnan(got)) continue;
    ASSERT_EQ(BFloat16(got).bits, b);
  }
}

TEST(Half, RoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  auto decode = [](uint16_t h) { return ref_half_value(h); };
  double overflow = 65504.0 + 16.0;  // midpoint between 65504 and 65536
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Focus on the representable range (exponents around half's), plus some everywhere.
    if (i % 4) u = (u & 0x807fffffu) | (uint32_t(100 + (u % 45)) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    uint16_t ref = ref_round(f, 0x7bff, overflow, decode);
    ASSERT_EQ(Half(f).bits, ref) << "f=" << f;
    ++checked;
  }
  // Exact ties: midpoints between consecutive halves go to the even one.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    double mid = 0.5 * (ref_half_value(h) + ref_half_value(uint16_t(h + 1)));
    float f = float(mid);
    if (double(f) != mid) continue;
    ASSERT_EQ(Half(f).bits, (h & 1) ? h + 1 : h);
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

TEST(BFloat16, RoundsToNearestEven) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  auto decode = [](uint16_t b) { return ref_bf16_value(b); };
  double overflow = (ref_bf16_value(0x7f7f) + std::ldexp(1.0, 128)) / 2;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16(f).bits, ref_round(f, 0x7f7f, overflow, decode)) << "f=" << f;
  }
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
  EXPECT_TRUE(std::isnan(float(Half(NAN))));
}

}  // namespace
}  // namespace dt
