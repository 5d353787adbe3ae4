// Tensor::trunc_normal_block against the truncated normal's closed forms: its CDF (a Kolmogorov-Smirnov distance),
// its mean and variance, the bounds; and the block of a fill is the slice of the whole fill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace dt {
namespace {

double phi(double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); }
double cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

struct Case {
  double mean, std, lo, hi;
};

// The distribution of Normal(mean, std) restricted to [lo, hi], in closed form.
struct Truncated {
  double alpha, beta, z, mean, var;
  Case c;
  explicit Truncated(const Case& k) : c(k) {
    alpha = (k.lo - k.mean) / k.std;
    beta = (k.hi - k.mean) / k.std;
    z = cdf(beta) - cdf(alpha);
    const double pa = std::isinf(alpha) ? 0 : phi(alpha), pb = std::isinf(beta) ? 0 : phi(beta);
    const double apa = std::isinf(alpha) ? 0 : alpha * pa, bpb = std::isinf(beta) ? 0 : beta * pb;
    const double m = (pa - pb) / z;
    mean = k.mean + k.std * m;
    var = k.std * k.std * (1 + (apa - bpb) / z - m * m);
  }
  double at(double x) const { return (cdf((x - c.mean) / c.std) - cdf(alpha)) / z; }
};

TEST(TruncNormal, MatchesTheClosedForms) {
  const int64_t n = 200000;
  const std::vector<Case> cases = {
      {0, 1, -2, 2},        // torchtitan's +-2 std
      {0, 0.02, -2, 2},     // absolute +-2 at std 0.02: a plain normal in effect
      {1.5, 2, -1, 0.5},    // an interval below the mean
      {0, 1, 1, 3},         // above the mean (the mirrored path)
      {0, 1, 4, 5},         // a far tail
      {0, 1, -0.1, 0.05},   // narrow: nearly uniform
      {-3, 0.5, -3.5, 10},  // one-sided in effect
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("mean " + std::to_string(k.mean) + " std " + std::to_string(k.std) + " [" + std::to_string(k.lo) +
                 ", " + std::to_string(k.hi) + "]");
    const Truncated t(k);
    std::vector<double> v =
        Tensor::trunc_normal_block({n}, {0}, {n}, 17, DType::f64, k.mean, k.std, k.lo, k.hi).to_vector();
    double sum = 0, sq = 0;
    for (double x : v) {
      ASSERT_GE(x, k.lo);
      ASSERT_LE(x, k.hi);
      sum += x;
    }
    const double mean = sum / double(n);
    for (double x : v) sq += (x - mean) * (x - mean);
    const double var = sq / double(n - 1);
    // Five standard errors of the sample mean and (for a bounded variable, kurtosis <= 3 here) of the variance.
    EXPECT_NEAR(mean, t.mean, 5 * std::sqrt(t.var / double(n)));
    EXPECT_NEAR(var, t.var, 5 * t.var * std::sqrt(2.0 / double(n)));
    // Kolmogorov-Smirnov: sup |F_n - F| below its 0.1 % critical value 1.95 / sqrt(n).
    std::sort(v.begin(), v.end());
    double d = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double f = t.at(v[size_t(i)]);
      d = std::max({d, f - double(i) / double(n), double(i + 1) / double(n) - f});
    }
    EXPECT_LT(d, 1.95 / std::sqrt(double(n)));
  }
}

TEST(TruncNormal, BlocksAreSlicesAndBadArgumentsAreNamed) {
  const Shape g{4, 5, 3};
  Tensor whole = Tensor::trunc_normal_block(g, {0, 0, 0}, g, 7, DType::f32, 0, 1, -2, 2);
  Tensor block = Tensor::trunc_normal_block(g, {1, 2, 0}, {2, 3, 3}, 7, DType::f32, 0, 1, -2, 2);
  EXPECT_EQ(block.to_vector(), whole.narrow(0, 1, 2).narrow(1, 2, 3).contiguous().to_vector());
  EXPECT_EQ(Tensor::trunc_normal_block({3}, {0}, {3}, 1, DType::f64, 5, 0, -1, 1).to_vector(),
            std::vector<double>(3, 1.0));  // std 0: the mean, clamped
  EXPECT_THROW(Tensor::trunc_normal_block({3}, {0}, {3}, 1, DType::f32, 0, 1, 2, 2), InvalidArgument);
  EXPECT_THROW(Tensor::trunc_normal_block({3}, {0}, {3}, 1, DType::f32, 0, -1, -2, 2), InvalidArgument);
  EXPECT_THROW(Tensor::trunc_normal_block({3}, {0}, {3}, 1, DType::i64, 0, 1, -2, 2), InvalidArgument);
  EXPECT_THROW(Tensor::trunc_normal_block({3}, {1}, {3}, 1, DType::f32, 0, 1, -2, 2), InvalidArgument);
}

}  // namespace
}  // namespace dt
