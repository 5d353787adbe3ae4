// Reductions against loops in double: several dim sets (contiguous ranges and permuted ones), keepdim, dtypes,
// non-contiguous inputs, empty tensors, NaN, ties, and errors.
#include "kernels/ops/reduction.h"

#include <cmath>
#include <limits>
#include <set>

#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

enum class Kind { kSum, kMean, kMax, kMin };

struct RefResult {
  Shape shape;
  std::vector<double> values, indices;  // indices: position along the flattened reduced dims (single dim only)
  std::vector<double> abs_sum;          // sum of |x| per output, for the summation error bound
};

RefResult reference(Kind kind, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  const Shape& sh = x.shape();
  int64_t nd = x.dim();
  std::set<int64_t> red;
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) red.insert(d);
  for (int64_t d : dims) red.insert(d < 0 ? d + nd : d);
  Shape keep_shape, out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    keep_shape.push_back(red.count(d) ? 1 : sh[size_t(d)]);
    if (!red.count(d) || keepdim) out_shape.push_back(red.count(d) ? 1 : sh[size_t(d)]);
  }
  int64_t nout = shape_numel(keep_shape);
  RefResult r;
  r.shape = out_shape;
  r.values.assign(size_t(nout), kind == Kind::kSum || kind == Kind::kMean ? 0.0 : std::nan(""));
  r.indices.assign(size_t(nout), -1);
  r.abs_sum.assign(size_t(nout), 0);
  std::vector<double> cnt(size_t(nout), 0);
  std::vector<double> xv = x.to_vector();
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, sh);
    std::vector<int64_t> oidx = idx;
    int64_t pos = 0;  // position within the reduced sub-block (row-major over reduced dims)
    for (int64_t d = 0; d < nd; ++d)
      if (red.count(d)) {
        pos = pos * sh[size_t(d)] + idx[size_t(d)];
        oidx[size_t(d)] = 0;
      }
    size_t o = size_t(ravel(oidx, keep_shape));
    double v = xv[size_t(i)];
    r.abs_sum[o] += std::fabs(v);
    if (kind == Kind::kSum || kind == Kind::kMean) {
      r.values[o] += v;
      cnt[o] += 1;
    } else {
      double& b = r.values[o];
      bool first = r.indices[o] < 0;
      bool take = first || (!std::isnan(b) && (std::isnan(v) || (kind == Kind::kMax ? v > b : v < b)));
      if (take) {
        b = v;
        r.indices[o] = double(pos);
      }
    }
  }
  if (kind == Kind::kMean)
    for (size_t o = 0; o < cnt.size(); ++o) r.values[o] /= cnt[o];
  return r;
}

TEST(OpsReduction, SumMeanMaxMinOverDimSets) {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {-1, 0}, {1, 2}, {0, 1, 2}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const Shape& sh : {Shape{3, 4, 5}, Shape{2, 1, 7}, Shape{1, 33, 3}}) {
      for (const auto& dims : dim_sets) {
        for (bool keepdim : {false, true}) {
          for (bool nc : {false, true}) {
            Tensor x = randu(sh, seed++, dt, -2, 2);
            if (nc) x = noncontig(x);
            std::string what = str_cat(dtype_name(dt), " ", shape_str(sh), " dims ", shape_str(dims),
                                       keepdim ? " keepdim" : "", nc ? " non-contiguous" : "");
            for (Kind k : {Kind::kSum, Kind::kMean, Kind::kMax, Kind::kMin}) {
              Tensor got = k == Kind::kSum    ? sum(x, dims, keepdim)
                           : k == Kind::kMean ? mean(x, dims, keepdim)
                           : k == Kind::kMax  ? amax(x, dims, keepdim)
                                              : amin(x, dims, keepdim);
              RefResult r = reference(k, x, dims, keepdim);
              ASSERT_EQ(got.shape(), r.shape) << what;
              ASSERT_EQ(got.dtype(), dt) << what;
              if (k == Kind::kSum || k == Kind::kMean) {
                // Summation error is bounded relative to sum |x| (cancellation makes |sum| small).
                std::vector<double> g = got.to_vector();
                for (size_t o = 0; o < g.size(); ++o) {
                  double scale = k == Kind::kMean ? r.abs_sum[o] / std::max(1.0, double(x.numel()) / double(g.size()))
                                                  : r.abs_sum[o];
                  EXPECT_NEAR(g[o], r.values[o], rtol_for(dt) * (scale + std::fabs(r.values[o])) + 1e-300)
                      << what << " kind " << int(k) << " out " << o;
                }
              } else {
                EXPECT_TRUE(all_close(got, r.values, 0)) << what << " kind " << int(k);
              }
            }
          }
        }
      }
    }
  }
}

TEST(OpsReduction, IntegerAndBoolSumsAreI64) {
  Tensor x = noncontig(randint({4, 6}, 5, -100, 100, DType::i32));
  Tensor s = sum(x, {1});
  EXPECT_EQ(s.dtype(), DType::i64);
  RefResult r = reference(Kind::kSum, x, {1}, false);
  EXPECT_TRUE(all_close(s, r.values, 0));
  EXPECT_TRUE(all_close(amax(x, {0}), reference(Kind::kMax, x, {0}, false).values, 0));
  Tensor b = randint({5, 3}, 6, 0, 1, DType::b8);
  Tensor bs = sum(b);
  EXPECT_EQ(bs.dtype(), DType::i64);
  EXPECT_EQ(bs.dim(), 0);
  EXPECT_DOUBLE_EQ(bs.item(), reference(Kind::kSum, b, {}, false).values[0]);
  EXPECT_TRUE(throws_with([&] { mean(x); }, "floating dtype"));
}

TEST(OpsReduction, LongRowsAndWideInner) {
  // inner == 1 with long rows (partial sums) and inner > 1 with a long reduced dim.
  Tensor x = randu({3, 10007}, 77, DType::f32, -1, 1);
  RefResult r = reference(Kind::kSum, x, {1}, false);
  std::vector<double> g = sum(x, {1}).to_vector();
  for (size_t o = 0; o < 3; ++o) EXPECT_NEAR(g[o], r.values[o], 1e-6 * r.abs_sum[o]);
  Tensor y = randu({2000, 37}, 78, DType::bf16, -1, 1);
  RefResult r2 = reference(Kind::kSum, y, {0}, true);
  std::vector<double> g2 = sum(y, {0}, true).to_vector();
  for (size_t o = 0; o < g2.size(); ++o) EXPECT_NEAR(g2[o], r2.values[o], 1e-2 * (std::fabs(r2.values[o]) + 1));
}

TEST(OpsReduction, MaxMinWithIndicesAndArg) {
  for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
    // Few distinct values: ties everywhere, the first index must win.
    Tensor x = noncontig(randint({4, 5, 6}, 9, 0, 3, dt));
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        ValuesIndices mx = max(x, dim, keepdim), mn = min(x, dim, keepdim);
        RefResult rmax = reference(Kind::kMax, x, {dim}, keepdim), rmin = reference(Kind::kMin, x, {dim}, keepdim);
        ASSERT_EQ(mx.values.shape(), rmax.shape);
        EXPECT_EQ(mx.indices.dtype(), DType::i64);
        EXPECT_TRUE(all_close(mx.values, rmax.values, 0));
        EXPECT_TRUE(all_close(mx.indices, rmax.indices, 0)) << "dim " << dim;
        EXPECT_TRUE(all_close(mn.values, rmin.values, 0));
        EXPECT_TRUE(all_close(mn.indices, rmin.indices, 0)) << "dim " << dim;
        EXPECT_TRUE(all_close(argmax(x, dim, keepdim), rmax.indices, 0));
        EXPECT_TRUE(all_close(argmin(x, dim, keepdim), rmin.indices, 0));
      }
    }
    // Over the flattened tensor.
    Tensor am = argmax(x);
    EXPECT_EQ(am.dim(), 0);
    Tensor flat = x.contiguous().view({x.numel()});
    EXPECT_DOUBLE_EQ(am.item(), reference(Kind::kMax, flat, {0}, false).indices[0]);
    EXPECT_EQ(argmin(x, std::nullopt, true).shape(), (Shape{1, 1, 1}));
    EXPECT_DOUBLE_EQ(max(x).item(), reference(Kind::kMax, x, {}, false).values[0]);
    EXPECT_DOUBLE_EQ(min(x).item(), reference(Kind::kMin, x, {}, false).values[0]);
  }
}

TEST(OpsReduction, NanPropagatesAndFirstNanIndexWins) {
  double nan = std::nan("");
  Tensor x = Tensor::from_vector({1, nan, 5, nan, 2, 0}, {2, 3}, DType::f32);
  ValuesIndices r = max(x, 1);
  EXPECT_TRUE(all_close(r.values, {nan, nan}, 0));
  EXPECT_TRUE(all_close(r.indices, {1, 0}, 0));
  EXPECT_TRUE(all_close(amin(x, {0}), {nan, nan, 0}, 0));
  EXPECT_TRUE(std::isnan(sum(x).item()));
}

TEST(OpsReduction, EmptyReductionsFollowTorch) {
  Tensor e = randu({0, 3}, 1);
  Tensor s = sum(e, {0});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_TRUE(all_close(s, {0, 0, 0}, 0));
  EXPECT_TRUE(all_close(mean(e, {0}), {std::nan(""), std::nan(""), std::nan("")}, 0));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));
  EXPECT_DOUBLE_EQ(sum(e).item(), 0);
  EXPECT_TRUE(throws_with([&] { amax(e, {0}); }, "size 0"));
  EXPECT_TRUE(throws_with([&] { max(e); }, "size 0"));
  EXPECT_TRUE(throws_with([&] { argmax(e, 0); }, "size 0"));
  // 0-d tensors reduce to themselves.
  Tensor z = Tensor::full({}, 2.5);
  EXPECT_DOUBLE_EQ(sum(z).item(), 2.5);
  EXPECT_DOUBLE_EQ(sum(z, {0}).item(), 2.5);
  EXPECT_DOUBLE_EQ(amax(z, {-1}, true).item(), 2.5);
}

TEST(OpsReduction, ArgumentErrors) {
  Tensor x = randu({2, 3}, 2);
  EXPECT_TRUE(throws_with([&] { sum(x, {0, -2}); }, "more than once"));
  EXPECT_TRUE(throws_with([&] { sum(x, {2}); }, "out of range"));
  EXPECT_TRUE(throws_with([&] { max(x, 5); }, "out of range"));
  EXPECT_TRUE(throws_with([&] { sum(Tensor()); }, "undefined"));
}

}  // namespace
}  // namespace dt::kernels
