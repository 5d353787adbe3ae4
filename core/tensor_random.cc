// Deterministic random fills: element i depends only on (seed, i) through a counter-based hash, so every rank of a
// job (and every test) can build the same global tensor independently, or just its own block of it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/splitmix.h"
#include "core/tensor.h"

namespace dt {
namespace {

// Uniform in [0, 1) with 53 random bits.
inline double unit(uint64_t seed, uint64_t i, uint64_t stream) {
  uint64_t h = splitmix64(splitmix64(seed ^ (stream * 0xd1b54a32d192ed03ull)) + i);
  return double(h >> 11) * (1.0 / 9007199254740992.0);
}

// The one generator loop: element j of the block is gen(global linear index of j).
template <typename Gen>
Tensor fill_block(const Shape& global, const Shape& offset, const Shape& block, DType dtype, Gen&& gen) {
  const size_t nd = global.size();
  DT_CHECK_ARG(offset.size() == nd && block.size() == nd, "rand_block: global ", shape_str(global), ", offset ",
               shape_str(offset), " and block ", shape_str(block), " must have the same number of dims");
  for (size_t d = 0; d < nd; ++d)
    DT_CHECK_ARG(offset[d] >= 0 && block[d] >= 0 && offset[d] + block[d] <= global[d], "rand_block: block ",
                 shape_str(block), " at offset ", shape_str(offset), " does not fit in ", shape_str(global));
  const int64_t n = shape_numel(block);
  std::vector<double> v(static_cast<size_t>(n));
  if (n > 0) {
    // Row-major walk over the block: `idx` is the block index, `g` the global linear index of its first element
    // along the last dim.
    Shape gstride(nd, 1);
    for (size_t d = nd; d-- > 1;) gstride[d - 1] = gstride[d] * global[d];
    const int64_t inner = nd == 0 ? 1 : block[nd - 1];
    std::vector<int64_t> idx(nd, 0);
    for (int64_t j = 0; j < n; j += inner) {
      int64_t g = 0;
      for (size_t d = 0; d < nd; ++d) g += (offset[d] + idx[d]) * gstride[d];
      for (int64_t k = 0; k < inner; ++k) v[size_t(j + k)] = gen(uint64_t(g + k));
      for (size_t d = nd == 0 ? 0 : nd - 1; d-- > 0;) {  // next row: carry over the dims before the last
        if (++idx[d] < block[d]) break;
        idx[d] = 0;
      }
    }
  }
  return Tensor::from_vector(v, block, dtype);
}

// Note [A truncated normal by inversion]
// trunc_normal draws u from (seed, i) and returns the u-quantile of the normal restricted to [lo, hi]:
// x = Phi^-1(Phi(alpha) + u (Phi(beta) - Phi(alpha))) in standard units, alpha and beta the bounds. One draw per
// element, so a rank's block is the block of the whole, as for randn, and any bounds cost the same (rejection would
// loop for narrow ones). When both bounds lie above the mean the mirrored interval is used, so Phi stays below 1/2
// where its doubles are dense. Phi^-1 is Acklam's rational approximation (relative error 1.2e-9) refined by one
// Halley step on erfc, which brings it to double rounding; the result is clamped to [lo, hi] as PyTorch's is.
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double normal_quantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  if (p <= 0) return -INFINITY;
  if (p >= 1) return INFINITY;
  const double low = 0.02425;
  double x;
  if (p < low || p > 1 - low) {
    const double q = std::sqrt(-2 * std::log(p < low ? p : 1 - p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    if (p > 1 - low) x = -x;
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = normal_cdf(x) - p, u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

}  // namespace

Tensor Tensor::rand_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed, DType dtype,
                          double lo, double hi) {
  DT_CHECK_ARG(hi >= lo, "rand: empty range [", lo, ", ", hi, ")");
  if (!is_floating(dtype)) {
    // Integers: uniform over the integers in [lo, hi).
    double span = std::floor(hi) - std::ceil(lo);
    return fill_block(global, offset, block, dtype,
                      [&](uint64_t i) { return std::ceil(lo) + std::floor(unit(seed, i, 0) * std::max(span, 1.0)); });
  }
  return fill_block(global, offset, block, dtype, [&](uint64_t i) { return lo + (hi - lo) * unit(seed, i, 0); });
}

Tensor Tensor::randn_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed, DType dtype,
                           double mean, double std) {
  DT_CHECK_ARG(std >= 0, "randn: std must be non-negative, got ", std);
  return fill_block(global, offset, block, dtype, [&](uint64_t i) {
    // Box-Muller on two independent streams of the same counter.
    double u1 = 1.0 - unit(seed, i, 1), u2 = unit(seed, i, 2);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
}

Tensor Tensor::trunc_normal_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed,
                                  DType dtype, double mean, double std, double lo, double hi) {
  DT_CHECK_ARG(std >= 0 && std::isfinite(std), "trunc_normal: std must be finite and non-negative, got ", std);
  DT_CHECK_ARG(lo < hi, "trunc_normal: the bounds [", lo, ", ", hi, "] are empty");
  DT_CHECK_ARG(is_floating(dtype), "trunc_normal: needs a floating dtype, got ", dtype_name(dtype));
  if (std == 0) return fill_block(global, offset, block, dtype, [&](uint64_t) { return std::clamp(mean, lo, hi); });
  // Standard units, mirrored when the interval lies above the mean (Note [A truncated normal by inversion]).
  const bool mirror = lo > mean;
  const double alpha = mirror ? (mean - hi) / std : (lo - mean) / std;
  const double beta = mirror ? (mean - lo) / std : (hi - mean) / std;
  const double pa = normal_cdf(alpha), pb = normal_cdf(beta);
  return fill_block(global, offset, block, dtype, [&](uint64_t i) {
    const double z = normal_quantile(pa + unit(seed, i, 3) * (pb - pa));
    return std::clamp(mean + (mirror ? -z : z) * std, lo, hi);
  });
}

Tensor Tensor::rand(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  return rand_block(shape, Shape(shape.size(), 0), shape, seed, dtype, lo, hi);
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, double mean, double std) {
  return randn_block(shape, Shape(shape.size(), 0), shape, seed, dtype, mean, std);
}

}  // namespace dt
