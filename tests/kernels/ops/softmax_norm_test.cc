// softmax / log_softmax over every dim and layer_norm / rms_norm over the last k dims, against double loops;
// large inputs (stability), non-contiguous inputs, dtypes, saved statistics and errors.
#include <cmath>

#include "kernels/ops/norm.h"
#include "kernels/ops/softmax.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  Shape sh = x.shape();
  if (sh.empty()) return {log ? 0.0 : 1.0};
  int64_t d = dim < 0 ? dim + x.dim() : dim;
  std::vector<double> v = x.to_vector(), out(v.size());
  int64_t n = sh[size_t(d)];
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, sh);
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      idx[size_t(d)] = j;
      mx = std::max(mx, v[size_t(ravel(idx, sh))]);
    }
    double s = 0;
    for (int64_t j = 0; j < n; ++j) {
      idx[size_t(d)] = j;
      s += std::exp(v[size_t(ravel(idx, sh))] - mx);
    }
    double xi = v[size_t(i)];
    out[size_t(i)] = log ? xi - mx - std::log(s) : std::exp(xi - mx) / s;
  }
  return out;
}

TEST(OpsSoftmax, MatchesReferenceOverEveryDim) {
  uint64_t seed = 1;
  for (DType dt : float_dtypes()) {
    for (const Shape& sh : {Shape{3, 4, 5}, Shape{1, 37}, Shape{6}, Shape{2, 0, 3}, Shape{}}) {
      for (int64_t dim = -int64_t(std::max<size_t>(sh.size(), 1)); dim < int64_t(std::max<size_t>(sh.size(), 1));
           ++dim) {
        for (bool nc : {false, true}) {
          for (double scale : {1.0, 1000.0}) {  // 1000: exp overflows without the max shift
            Tensor x = randu(sh, seed++, dt, -3 * scale, 3 * scale);
            if (nc) x = noncontig(x);
            for (bool log : {false, true}) {
              Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
              ASSERT_EQ(y.shape(), sh);
              double atol = dt == DType::f64 ? 1e-14 : dt == DType::f32 ? 1e-6 : 1e-2;
              // log_softmax of large inputs: absolute error scales with |x|.
              if (log) atol *= scale;
              EXPECT_TRUE(all_close(y, ref_softmax(x, dim, log), rtol_for(dt), atol))
                  << (log ? "log_softmax " : "softmax ") << dtype_name(dt) << " " << shape_str(sh) << " dim " << dim
                  << " scale " << scale << (nc ? " non-contiguous" : "");
            }
          }
        }
      }
    }
  }
}

TEST(OpsSoftmax, Errors) {
  EXPECT_TRUE(throws_with([] { softmax(randint({3}, 1, 0, 3, DType::i32), 0); }, "floating dtype"));
  EXPECT_TRUE(throws_with([] { softmax(randu({3}, 1), 1); }, "out of range"));
  EXPECT_TRUE(throws_with([] { softmax_backward(randu({3}, 1), randu({4}, 2), 0); }, "must match"));
}

struct NormRef {
  std::vector<double> out, mean, rstd;
};

NormRef ref_norm(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps, bool rms) {
  int64_t cols = 1;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) cols *= x.size(d);
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.size(d);
  std::vector<double> v = x.to_vector(), wv = w.defined() ? w.to_vector() : std::vector<double>(),
                      bv = b.defined() ? b.to_vector() : std::vector<double>();
  NormRef r;
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, ss = 0;
    if (!rms) {
      for (int64_t j = 0; j < cols; ++j) mu += v[size_t(i * cols + j)];
      mu /= double(cols);
    }
    for (int64_t j = 0; j < cols; ++j) ss += (v[size_t(i * cols + j)] - mu) * (v[size_t(i * cols + j)] - mu);
    double rs = 1 / std::sqrt(ss / double(cols) + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (int64_t j = 0; j < cols; ++j) {
      double o = (v[size_t(i * cols + j)] - mu) * rs;
      if (w.defined()) o *= wv[size_t(j)];
      if (b.defined()) o += bv[size_t(j)];
      r.out.push_back(o);
    }
  }
  return r;
}

TEST(OpsNorm, LayerNormAndRmsNormMatchReference) {
  uint64_t seed = 50;
  for (DType dt : float_dtypes()) {
    for (const Shape& sh : {Shape{4, 7}, Shape{2, 3, 5}, Shape{1, 300}, Shape{0, 4}, Shape{6}}) {
      for (int64_t k = 1; k <= std::min<int64_t>(2, int64_t(sh.size())); ++k) {
        Shape ns(sh.end() - k, sh.end());
        for (int affine = 0; affine < 3; ++affine) {  // none, weight, weight + bias
          for (bool nc : {false, true}) {
            Tensor x = randu(sh, seed++, dt, -2, 3);
            if (nc) x = noncontig(x);
            Tensor w = affine >= 1 ? randu(ns, seed++, dt, 0.5, 1.5) : Tensor();
            Tensor b = affine >= 2 ? randu(ns, seed++, dt) : Tensor();
            std::string what =
                str_cat(dtype_name(dt), " ", shape_str(sh), " k=", k, " affine=", affine, nc ? " non-contiguous" : "");
            double atol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-5 : 3e-2;
            LayerNormResult ln = layer_norm(x, ns, w, b, 1e-5);
            NormRef r = ref_norm(x, k, w, b, 1e-5, false);
            Shape lead(sh.begin(), sh.end() - k);
            ASSERT_EQ(ln.mean.shape(), lead) << what;
            EXPECT_EQ(ln.mean.dtype(), dt == DType::f64 ? DType::f64 : DType::f32);
            EXPECT_TRUE(all_close(ln.out, r.out, rtol_for(dt), atol)) << "layer_norm " << what;
            EXPECT_TRUE(all_close(ln.mean, r.mean, 1e-5, 1e-6)) << "layer_norm mean " << what;
            EXPECT_TRUE(all_close(ln.rstd, r.rstd, 1e-5)) << "layer_norm rstd " << what;
            RmsNormResult rn = rms_norm(x, ns, w, 1e-6);
            NormRef q = ref_norm(x, k, w, Tensor(), 1e-6, true);
            EXPECT_TRUE(all_close(rn.out, q.out, rtol_for(dt), atol)) << "rms_norm " << what;
            EXPECT_TRUE(all_close(rn.rstd, q.rstd, 1e-5)) << "rms_norm rstd " << what;
          }
        }
      }
    }
  }
}

TEST(OpsNorm, Errors) {
  Tensor x = randu({3, 4}, 1);
  EXPECT_TRUE(throws_with([&] { layer_norm(x, {5}); }, "does not match the trailing dims"));
  EXPECT_TRUE(throws_with([&] { layer_norm(x, {}); }, "between 1 and"));
  EXPECT_TRUE(throws_with([&] { layer_norm(x, {4}, randu({3}, 2)); }, "weight has shape"));
  EXPECT_TRUE(throws_with([&] { rms_norm(x, {4}, randu({4}, 2, DType::f64)); }, "same dtype"));
  LayerNormResult r = layer_norm(x, {4});
  EXPECT_TRUE(throws_with([&] { layer_norm_backward(x, x, {4}, r.mean.to(DType::f64), r.rstd); }, "must have dtype"));
}

}  // namespace
}  // namespace dt::kernels
