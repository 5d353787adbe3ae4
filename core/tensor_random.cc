// Deterministic random fills: element i depends only on (seed, i) through a counter-based hash, so every rank of a
// job (and every test) can build the same global tensor independently.
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

template <typename Gen>
Tensor fill_with(const Shape& shape, DType dtype, Gen&& gen) {
  int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = gen(uint64_t(i));
  return Tensor::from_vector(v, shape, dtype);
}

}  // namespace

Tensor Tensor::rand(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  DT_CHECK_ARG(hi >= lo, "rand: empty range [", lo, ", ", hi, ")");
  if (!is_floating(dtype)) {
    // Integers: uniform over the integers in [lo, hi).
    double span = std::floor(hi) - std::ceil(lo);
    return fill_with(shape, dtype, [&](uint64_t i) {
      return std::ceil(lo) + std::floor(unit(seed, i, 0) * std::max(span, 1.0));
    });
  }
  return fill_with(shape, dtype, [&](uint64_t i) { return lo + (hi - lo) * unit(seed, i, 0); });
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, double mean, double std) {
  DT_CHECK_ARG(std >= 0, "randn: std must be non-negative, got ", std);
  return fill_with(shape, dtype, [&](uint64_t i) {
    // Box-Muller on two independent streams of the same counter.
    double u1 = 1.0 - unit(seed, i, 1), u2 = unit(seed, i, 2);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
}

}  // namespace dt
