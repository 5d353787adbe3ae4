// fill for every dtype on contiguous buffers and strided views, against the reference conversion of the scalar;
// elements outside a view are checked untouched; unrepresentable values are rejected.
#include "kernels/fill.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

// The bits a fill with `v` must store in dtype t.
uint64_t expected_bits(const Scalar& v, DType t) {
  if (v.is_integral()) return ref_convert(double(v.as_int64()), true, v.as_int64(), t);
  return ref_convert(v.as_double(), false, 0, t);
}

std::vector<Scalar> scalars_for(DType t) {
  std::vector<Scalar> s = {0, 1, true, false, 7.0, 2.75, -0.0};
  if (t != DType::u8 && t != DType::b8) s.insert(s.end(), {-3, -2.5});
  if (is_floating(t)) s.insert(s.end(), {1e10, -1e-9, 65520.0, 1.0 + std::ldexp(1.0, -11), INFINITY, NAN});
  if (t == DType::i64) s.insert(s.end(), {int64_t(9007199254740993), std::numeric_limits<int64_t>::min()});
  if (t == DType::i32) s.insert(s.end(), {std::numeric_limits<int32_t>::max(), -2147483648.0});
  if (t == DType::u8) s.insert(s.end(), {255, uint8_t(200), 255.9});
  if (t == DType::i8) s.insert(s.end(), {-128, 127});
  if (t == DType::b8) s.insert(s.end(), {5, -0.5});
  return s;
}

TEST(Fill, ContiguousEveryDtypeSizeAndValue) {
  for (DType t : all_dtypes()) {
    for (int64_t n : {0, 1, 37, 1000}) {
      for (const Scalar& v : scalars_for(t)) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n) +
                     " value=" + std::to_string(v.as_double()));
        size_t es = dtype_size(t);
        std::vector<unsigned char> buf(size_t(n) * es + 8, 0xcd);
        fill(n ? buf.data() : nullptr, n, t, v, Device::cpu());
        uint64_t want = expected_bits(v, t);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_value(load_bits(buf.data() + i * int64_t(es), es), want, t)) << "element " << i;
        for (size_t i = size_t(n) * es; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xcd) << "wrote past the end";
      }
    }
  }
}

TEST(Fill, StridedViewsLeaveTheRest) {
  struct Case {
    Shape base;
    std::function<Tensor(const Tensor&)> view;
  };
  std::vector<Case> cases = {
      {{5, 7}, [](const Tensor& t) { return t.t(); }},
      {{6, 9}, [](const Tensor& t) { return t.narrow(1, 2, 5); }},
      {{6, 9}, [](const Tensor& t) { return t.narrow(0, 1, 3).narrow(1, 0, 1); }},
      {{4, 5, 6}, [](const Tensor& t) { return t.select(2, 3); }},
      {{2, 3, 1, 4, 2, 3},
       [](const Tensor& t) {
         return t.permute({5, 1, 3, 0, 2, 4}).narrow(0, 1, 2);
       }},
      {{3, 4}, [](const Tensor& t) { return t.narrow(1, 1, 0); }},
  };
  uint64_t seed = 11;
  for (DType t : all_dtypes()) {
    for (const Case& c : cases) {
      Tensor base = Tensor::empty(c.base, t);
      fill_random_bits(base, seed++);
      std::vector<uint64_t> before(size_t(base.numel()));
      size_t es = dtype_size(t);
      for (int64_t i = 0; i < base.numel(); ++i)
        before[size_t(i)] = load_bits(static_cast<char*>(base.data_ptr()) + i * int64_t(es), es);
      Tensor v = c.view(base);
      Scalar value = t == DType::b8 ? Scalar(true) : Scalar(3);
      fill(v, value);
      std::vector<bool> in_view(size_t(base.numel()), false);
      for_each_index(v.shape(), [&](const std::vector<int64_t>& idx, int64_t) {
        char* p = element_ptr(v, idx);
        in_view[size_t((p - static_cast<char*>(base.data_ptr())) / int64_t(es))] = true;
        ASSERT_EQ(load_bits(p, es), expected_bits(value, t)) << dtype_name(t);
      });
      for (int64_t i = 0; i < base.numel(); ++i) {
        if (!in_view[size_t(i)]) {
          ASSERT_EQ(load_bits(static_cast<char*>(base.data_ptr()) + i * int64_t(es), es), before[size_t(i)])
              << dtype_name(t) << " element " << i << " outside the view changed";
        }
      }
    }
  }
}

TEST(Fill, HandCheckedValues) {
  Tensor h = Tensor::empty({3}, DType::f16);
  fill(h, 65520.0);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x7c00);  // ties to even at the top: infinity
  fill(h, 1.0 + std::ldexp(1.0, -10));
  EXPECT_EQ(h.data<Half>()[2].bits, 0x3c01);
  Tensor i = Tensor::empty({2}, DType::i64);
  fill(i, int64_t(9007199254740993));  // 2^53 + 1: exact through Scalar, not through a double
  EXPECT_EQ(i.data<int64_t>()[1], int64_t(9007199254740993));
  fill(i, -2.9);
  EXPECT_EQ(i.data<int64_t>()[0], -2);
  Tensor b = Tensor::empty({2}, DType::b8);
  fill(b, 0.25);
  EXPECT_TRUE(b.data<bool>()[0]);
}

TEST(Fill, RejectsUnrepresentableValues) {
  Tensor u = Tensor::empty({2}, DType::u8), s = Tensor::empty({2}, DType::i8), i = Tensor::empty({2}, DType::i32),
         l = Tensor::empty({2}, DType::i64);
  EXPECT_THROW(fill(u, 256), InvalidArgument);
  EXPECT_THROW(fill(u, -1), InvalidArgument);
  EXPECT_THROW(fill(u, -1.5), InvalidArgument);
  EXPECT_NO_THROW(fill(u, -0.5));  // truncates to 0
  EXPECT_THROW(fill(s, 128), InvalidArgument);
  EXPECT_THROW(fill(i, NAN), InvalidArgument);
  EXPECT_THROW(fill(i, INFINITY), InvalidArgument);
  EXPECT_THROW(fill(i, 3e9), InvalidArgument);
  EXPECT_THROW(fill(l, 9.3e18), InvalidArgument);
  EXPECT_THROW(fill(l.expand({2, 2}).t(), 1), InvalidArgument);  // written stride 0
  EXPECT_THROW(fill(nullptr, 3, DType::f32, 1, Device::cpu()), InvalidArgument);
  EXPECT_THROW(fill(u.data_ptr(), -1, DType::u8, 1, Device::cpu()), InvalidArgument);
  try {
    fill(u, 300);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("u8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::kernels
