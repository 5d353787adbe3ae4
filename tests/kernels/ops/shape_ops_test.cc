// cat / split / stack / tril / triu / causal_mask / arange against element-by-element references.
#include "kernels/ops/shape_ops.h"

#include <cmath>

#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

TEST(OpsShape, CatAlongEveryDim) {
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::b8}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> parts;
      std::vector<int64_t> sizes = {2, 0, 3, 1};
      for (int64_t s : sizes) {
        Shape sh = {3, 4, 5};
        sh[size_t(d)] = s;
        Tensor t = randint(sh, seed++, 0, 50, dt == DType::b8 ? DType::i32 : dt).to(dt);
        parts.push_back(seed % 2 ? noncontig(t) : t);
      }
      Tensor y = cat(parts, dim);
      Shape want_shape = {3, 4, 5};
      want_shape[size_t(d)] = 6;
      ASSERT_EQ(y.shape(), want_shape);
      std::vector<double> want(size_t(y.numel()));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto idx = unravel(i, want_shape);
        int64_t k = idx[size_t(d)];
        size_t p = 0;
        while (k >= sizes[p]) k -= sizes[p++];
        idx[size_t(d)] = k;
        want[size_t(i)] = parts[p].to_vector()[size_t(ravel(idx, parts[p].shape()))];
      }
      EXPECT_TRUE(all_close(y, want, 0)) << dtype_name(dt) << " dim " << dim;
    }
  }
  // Legacy 1-d empty tensors are skipped.
  Tensor a = randu({2, 3}, 5);
  Tensor y = cat({Tensor::empty({0}), a, Tensor::empty({0})}, 1);
  EXPECT_TRUE(all_close(y, a.to_vector(), 0));
  EXPECT_TRUE(throws_with([&] { cat({a, randu({3, 3}, 6)}, 1); }, "differ outside dim"));
  EXPECT_TRUE(throws_with([&] { cat({a, a.to(DType::f64)}, 0); }, "one dtype"));
  EXPECT_TRUE(throws_with([&] { cat({}, 0); }, "non-empty"));
}

TEST(OpsShape, SplitGivesContiguousCopiesAndStackAddsADim) {
  Tensor x = noncontig(randu({4, 7}, 9));
  std::vector<Tensor> parts = split(x, {2, 0, 5}, 1);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<double> xv = x.to_vector();
  int64_t off = 0;
  for (const Tensor& p : parts) {
    EXPECT_TRUE(p.is_contiguous());
    EXPECT_FALSE(p.shares_storage_with(x));
    std::vector<double> want;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < p.size(1); ++j) want.push_back(xv[size_t(i * 7 + off + j)]);
    EXPECT_TRUE(all_close(p, want, 0));
    off += p.size(1);
  }
  Tensor a = randu({2, 3}, 10), b = noncontig(randu({2, 3}, 11));
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor s = stack({a, b}, dim);
    int64_t d = dim < 0 ? dim + 3 : dim;
    Shape sh = {2, 3};
    sh.insert(sh.begin() + d, 2);
    ASSERT_EQ(s.shape(), sh);
    std::vector<double> av = a.to_vector(), bv = b.to_vector(), want;
    for (int64_t i = 0; i < s.numel(); ++i) {
      auto idx = unravel(i, sh);
      int64_t which = idx[size_t(d)];
      idx.erase(idx.begin() + d);
      want.push_back((which ? bv : av)[size_t(ravel(idx, {2, 3}))]);
    }
    EXPECT_TRUE(all_close(s, want, 0)) << "stack dim " << dim;
  }
  EXPECT_TRUE(throws_with([&] { stack({a, randu({3, 2}, 1)}); }, "one shape"));
}

TEST(OpsShape, TrilTriuAndCausalMask) {
  for (DType dt : {DType::f32, DType::f16, DType::i32, DType::b8}) {
    for (const Shape& sh : {Shape{3, 5}, Shape{5, 3}, Shape{2, 4, 4}, Shape{0, 3}}) {
      for (int64_t diag : {-2, -1, 0, 1, 3}) {
        Tensor x = noncontig(randint(sh, 7, 1, 9, dt == DType::b8 ? DType::i32 : dt).to(dt));
        Tensor lo = tril(x, diag), hi = triu(x, diag);
        std::vector<double> xv = x.to_vector(), wl, wh;
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto idx = unravel(i, sh);
          int64_t r = idx[idx.size() - 2], c = idx.back();
          wl.push_back(c - r <= diag ? xv[size_t(i)] : 0);
          wh.push_back(c - r >= diag ? xv[size_t(i)] : 0);
        }
        EXPECT_TRUE(all_close(lo, wl, 0)) << "tril " << dtype_name(dt) << " " << shape_str(sh) << " diag " << diag;
        EXPECT_TRUE(all_close(hi, wh, 0)) << "triu " << dtype_name(dt) << " " << shape_str(sh) << " diag " << diag;
      }
    }
  }
  for (auto [rows, cols, diag] : {std::tuple{4, 4, 0}, {2, 5, 3}, {5, 2, -1}, {0, 3, 0}}) {
    Tensor m = causal_mask(rows, cols, diag);
    EXPECT_EQ(m.dtype(), DType::b8);
    std::vector<double> want;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) want.push_back(j - i <= diag);
    EXPECT_TRUE(all_close(m, want, 0)) << rows << "x" << cols << " diag " << diag;
  }
  EXPECT_TRUE(throws_with([] { tril(randu({3}, 1)); }, "at least 2 dims"));
}

TEST(OpsShape, Arange) {
  EXPECT_TRUE(all_close(arange(5), {0, 1, 2, 3, 4}, 0));
  EXPECT_EQ(arange(5).dtype(), DType::i64);
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_TRUE(all_close(arange(1, 2, 0.25, DType::f32), {1, 1.25, 1.5, 1.75}, 0));
  EXPECT_TRUE(all_close(arange(10, 0, -3, DType::i32), {10, 7, 4, 1}, 0));
  EXPECT_TRUE(all_close(arange(0, 1, 0.3, DType::f64), {0, 0.3, 0.6, 0.8999999999999999}, 1e-15));
  EXPECT_TRUE(throws_with([] { arange(0, 1, 0); }, "step non-zero"));
  EXPECT_TRUE(throws_with([] { arange(0, 5, -1); }, "inconsistent"));
  EXPECT_TRUE(throws_with([] { arange(-1); }, "non-negative"));
}

}  // namespace
}  // namespace dt::kernels
