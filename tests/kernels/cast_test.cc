// cast (contiguous) and copy_cast (strided) for every pair of dtypes against an independent reference: 16-bit
// floats rounded by table search (round to nearest, ties to even, through float), integers by explicit wrapping.
#include "kernels/cast.h"

#include <gtest/gtest.h>

#include "kernels/copy.h"
#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

// Largest magnitude the source dtype holds comfortably (f16 overflows at 65520).
double source_limit(DType s) { return s == DType::f16 ? 60000.0 : 1e30; }

// Random source data valid for a cast S -> D: integer sources cover their range (i64 within 2^50 so that doubles
// stay exact); floating sources going to floating dtypes are random bits (NaN, infinities, subnormals included);
// floating sources going to integers stay inside the destination's range.
Tensor make_cast_source(const Shape& shape, DType s, DType d, uint64_t seed) {
  if (s == DType::b8 || s == DType::i8 || s == DType::u8 || s == DType::i32) {
    Tensor t = Tensor::empty(shape, s);
    fill_random_bits(t, seed);
    return t;
  }
  if (s == DType::i64) {
    Tensor t = Tensor::empty(shape, s);
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<int64_t>()[i] = int64_t(rng() % (uint64_t(1) << 51)) - (int64_t(1) << 50);
    return t;
  }
  if (is_floating(d)) {
    Tensor t = Tensor::empty(shape, s);
    fill_random_bits(t, seed);
    return t;
  }
  double lim = source_limit(s);
  switch (d) {
    case DType::u8:
      return random_values(shape, s, seed, 0, 255.9);
    case DType::i8:
      return random_values(shape, s, seed, -128.9, 127.9);
    case DType::i32:
      return random_values(shape, s, seed, -std::min(lim, 2e9), std::min(lim, 2e9));
    case DType::i64:
      return random_values(shape, s, seed, -std::min(lim, 1e15), std::min(lim, 1e15));
    default:  // bool
      return random_values(shape, s, seed, -3, 3);
  }
}

void expect_converted(const Tensor& dst, const Tensor& src) {
  ASSERT_EQ(dst.shape(), src.shape());
  DType d = dst.dtype(), s = src.dtype();
  for_each_index(src.shape(), [&](const std::vector<int64_t>& idx, int64_t lin) {
    const char* sp = element_ptr(src, idx);
    uint64_t want = ref_convert(exact_value(sp, s), !is_floating(s), exact_int(sp, s), d);
    uint64_t got = load_bits(element_ptr(dst, idx), dtype_size(d));
    ASSERT_TRUE(same_value(got, want, d)) << case_name(d, s) << " element " << lin << ": source " << exact_value(sp, s)
                                          << " gave bits 0x" << std::hex << got << ", expected 0x" << want;
  });
}

TEST(Cast, EveryDtypePairAndSize) {
  uint64_t seed = 1;
  for (DType d : all_dtypes()) {
    for (DType s : all_dtypes()) {
      for (int64_t n : {0, 1, 37, 1000}) {
        SCOPED_TRACE(case_name(d, s) + " n=" + std::to_string(n));
        Tensor src = make_cast_source({n}, s, d, seed++);
        Tensor dst = Tensor::empty({n}, d);
        cast(n ? dst.data_ptr() : nullptr, d, n ? src.data_ptr() : nullptr, s, n, Device::cpu());
        expect_converted(dst, src);
      }
    }
  }
}

TEST(Cast, RoundingAndSpecialValues) {
  const float tiny = std::ldexp(1.0f, -25);
  std::vector<float> vals = {0.0f,
                             -0.0f,
                             INFINITY,
                             -INFINITY,
                             NAN,
                             1.0f,
                             -1.5f,
                             65504.0f,
                             65505.0f,
                             65519.99f,
                             65520.0f,
                             1e-8f,
                             std::ldexp(1.0f, -24),
                             tiny,
                             3 * tiny,
                             1 + std::ldexp(1.0f, -11),
                             1 + 3 * std::ldexp(1.0f, -11),
                             1 + std::ldexp(1.0f, -8),
                             1 + 3 * std::ldexp(1.0f, -8),
                             3.0e38f,
                             -3.4028235e38f,
                             std::ldexp(1.0f, -130)};
  int64_t n = int64_t(vals.size());
  Tensor src = Tensor::from_data(vals, {n});
  for (DType d : float_dtypes()) {
    Tensor dst = Tensor::empty({n}, d);
    cast(dst.data_ptr(), d, src.data_ptr(), DType::f32, n, Device::cpu());
    expect_converted(dst, src);
  }
  // Hand-checked bits, which also pin down the reference's tie and overflow rules.
  Tensor h = Tensor::empty({n}, DType::f16), b = Tensor::empty({n}, DType::bf16);
  cast(h.data_ptr(), DType::f16, src.data_ptr(), DType::f32, n, Device::cpu());
  cast(b.data_ptr(), DType::bf16, src.data_ptr(), DType::f32, n, Device::cpu());
  auto hb = [&](int i) { return h.data<Half>()[i].bits; };
  auto bb = [&](int i) { return b.data<BFloat16>()[i].bits; };
  EXPECT_EQ(hb(7), 0x7bff);   // 65504 = max
  EXPECT_EQ(hb(8), 0x7bff);   // 65505 rounds down
  EXPECT_EQ(hb(9), 0x7bff);   // below the midpoint 65520
  EXPECT_EQ(hb(10), 0x7c00);  // the midpoint ties to even: infinity
  EXPECT_EQ(hb(12), 0x0001);  // 2^-24, smallest subnormal
  EXPECT_EQ(hb(13), 0x0000);  // 2^-25: tie between 0 and 2^-24 -> even (0)
  EXPECT_EQ(hb(14), 0x0002);  // 3 * 2^-25: tie -> even (2 * 2^-24)
  EXPECT_EQ(hb(15), 0x3c00);  // 1 + 2^-11: tie -> 1.0
  EXPECT_EQ(hb(16), 0x3c02);  // 1 + 3 * 2^-11: tie -> 1 + 2^-9
  EXPECT_EQ(bb(17), 0x3f80);  // 1 + 2^-8: tie -> 1.0
  EXPECT_EQ(bb(18), 0x3f82);  // 1 + 3 * 2^-8: tie -> 1 + 2^-6
  EXPECT_EQ(hb(2), 0x7c00);
  EXPECT_EQ(hb(3), 0xfc00);
  EXPECT_EQ(bb(19), 0x7f62);  // 3e38 = 1.76325 * 2^127 -> 1 + 98/128
  EXPECT_EQ(bb(20), 0xff80);  // -max float rounds up to 2^128 in bf16: -infinity
  EXPECT_EQ(bb(1), 0x8000);   // -0 keeps its sign
  EXPECT_TRUE(std::isnan(float(h.data<Half>()[4])));
  EXPECT_TRUE(std::isnan(float(b.data<BFloat16>()[4])));
}

TEST(Cast, IntegerAndBoolRules) {
  std::vector<double> v = {-2.7, 2.7, -0.5, 0.0, 0.25, 127.0, -128.0};
  Tensor f = Tensor::from_vector(v, {7}, DType::f64);
  Tensor i = Tensor::empty({7}, DType::i32), bo = Tensor::empty({7}, DType::b8);
  cast(i.data_ptr(), DType::i32, f.data_ptr(), DType::f64, 7, Device::cpu());
  cast(bo.data_ptr(), DType::b8, f.data_ptr(), DType::f64, 7, Device::cpu());
  std::vector<int32_t> want_i = {-2, 2, 0, 0, 0, 127, -128};
  std::vector<bool> want_b = {true, true, true, false, true, true, true};
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(i.data<int32_t>()[k], want_i[size_t(k)]);
    EXPECT_EQ(bo.data<bool>()[k], want_b[size_t(k)]);
  }
  std::vector<int32_t> big = {300, -1, 255, 256};
  Tensor bi = Tensor::from_data(big, {4});
  Tensor u = Tensor::empty({4}, DType::u8), s8 = Tensor::empty({4}, DType::i8);
  cast(u.data_ptr(), DType::u8, bi.data_ptr(), DType::i32, 4, Device::cpu());
  cast(s8.data_ptr(), DType::i8, bi.data_ptr(), DType::i32, 4, Device::cpu());
  EXPECT_EQ(std::vector<uint8_t>(u.data<uint8_t>(), u.data<uint8_t>() + 4), (std::vector<uint8_t>{44, 255, 255, 0}));
  EXPECT_EQ(std::vector<int8_t>(s8.data<int8_t>(), s8.data<int8_t>() + 4), (std::vector<int8_t>{44, -1, -1, 0}));
}

TEST(Cast, ArgumentsValidated) {
  float x = 1;
  EXPECT_THROW(cast(&x, DType::f32, &x, DType::f32, -1, Device::cpu()), InvalidArgument);
  EXPECT_THROW(cast(nullptr, DType::f32, &x, DType::f32, 1, Device::cpu()), InvalidArgument);
  EXPECT_NO_THROW(cast(nullptr, DType::f32, nullptr, DType::f16, 0, Device::cpu()));
#if !defined(DT_WITH_CUDA)
  EXPECT_THROW(cast(&x, DType::f32, &x, DType::f32, 1, Device::cuda(0)), Unsupported);
#endif
}

// copy_cast on strided views: every pair of dtypes, a few layouts on each side.
TEST(CopyCast, EveryDtypePairOnStridedViews) {
  struct Layout {
    const char* name;
    Shape base;
    std::function<Tensor(const Tensor&)> view;
  };
  std::vector<Layout> srcs = {
      {"transposed", {5, 7}, [](const Tensor& t) { return t.t(); }},
      {"big_transposed", {40, 33}, [](const Tensor& t) { return t.t(); }},
      {"narrowed", {6, 9}, [](const Tensor& t) { return t.narrow(1, 2, 5).narrow(0, 1, 4); }},
      {"expanded",
       {1, 7},
       [](const Tensor& t) {
         return t.expand({4, 7});
       }},
      {"permuted_4d",
       {2, 3, 4, 3},
       [](const Tensor& t) {
         return t.permute({3, 1, 0, 2});
       }},
      {"empty", {0, 3}, [](const Tensor& t) { return t; }},
  };
  uint64_t seed = 5000;
  for (DType d : all_dtypes()) {
    for (DType s : all_dtypes()) {
      for (const Layout& l : srcs) {
        SCOPED_TRACE(case_name(d, s) + " " + l.name);
        Tensor src = l.view(make_cast_source(l.base, s, d, seed++));
        // Destination: a transposed 2-d block or a contiguous tensor, alternating.
        Tensor dst = (seed % 2 && src.dim() == 2) ? Tensor::empty({src.size(1), src.size(0)}, d).t()
                                                  : Tensor::empty(src.shape(), d);
        copy_cast(dst, src);
        expect_converted(dst, src);
      }
    }
  }
}

}  // namespace
}  // namespace dt::kernels
