// Deterministic random fills: element i depends only on (seed, i) through a counter-based hash, so every rank of a
// job (and every test) can build the same global tensor independently, or just its own block of it.
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

Tensor Tensor::rand(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  return rand_block(shape, Shape(shape.size(), 0), shape, seed, dtype, lo, hi);
}

Tensor Tensor::randn(const Shape& shape, uint64_t seed, DType dtype, double mean, double std) {
  return randn_block(shape, Shape(shape.size(), 0), shape, seed, dtype, mean, std);
}

}  // namespace dt
