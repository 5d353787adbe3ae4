// Helpers for the kernels/ops tests: random inputs, non-contiguous copies, index arithmetic and comparisons with
// references computed in double by the tests themselves.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dt::kernels::ops_test {

// Relative tolerance of one op's result per dtype (the reference is computed in double from the same, already
// rounded, input values; the error is the kernel's accumulation plus one rounding of the result).
inline double rtol_for(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 4e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

inline std::vector<DType> float_dtypes() { return {DType::f32, DType::f64, DType::f16, DType::bf16}; }

inline Tensor randu(const Shape& shape, uint64_t seed, DType dtype = DType::f32, double lo = -1, double hi = 1) {
  return Tensor::rand(shape, seed, dtype, lo, hi);
}

// Integer-valued random tensor in [lo, hi] (any dtype).
inline Tensor randint(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype) {
  Tensor u = Tensor::rand(shape, seed, DType::f64, 0, 1);
  std::vector<double> v = u.to_vector();
  for (double& x : v) x = double(lo + std::min<int64_t>(hi - lo, int64_t(x * double(hi - lo + 1))));
  return Tensor::from_vector(v, shape, dtype);
}

// The same values in a non-contiguous layout: dims reversed in memory (>= 2 dims) or every other element (1 dim).
inline Tensor noncontig(const Tensor& t) {
  if (t.dim() == 0) return t;
  if (t.dim() == 1) {
    Tensor base = Tensor::zeros({t.size(0), 2}, t.dtype());
    Tensor v = base.select(1, 1);
    v.copy_(t);
    return v;
  }
  std::vector<int64_t> rev;
  Shape rshape;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    rev.push_back(d);
    rshape.push_back(t.size(d));
  }
  Tensor base = Tensor::zeros(rshape, t.dtype());
  Tensor v = base.permute(rev);
  v.copy_(t);
  return v;
}

inline std::vector<int64_t> unravel(int64_t lin, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : lin % shape[d];
    lin = shape[d] == 0 ? 0 : lin / shape[d];
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + idx[d];
  return lin;
}

// Value of a row-major `vals` of `shape` at the output index `out_idx` of a broadcast result.
inline double at_bcast(const std::vector<double>& vals, const Shape& shape, const std::vector<int64_t>& out_idx) {
  size_t lead = out_idx.size() - shape.size();
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + (shape[d] == 1 ? 0 : out_idx[lead + d]);
  return vals[size_t(lin)];
}

inline Shape bcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

inline bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Compares every element (contiguous order) with `want`; reports the first few mismatches.
inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, double rtol,
                                            double atol = 0) {
  std::vector<double> g = got.to_vector();
  if (g.size() != want.size())
    return ::testing::AssertionFailure() << "size " << g.size() << " vs reference " << want.size() << " (shape "
                                         << shape_str(got.shape()) << ")";
  int bad = 0;
  std::string msg;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!close(g[i], want[i], rtol, atol)) {
      if (bad < 5)
        msg += str_cat(" [", i, "] got ", g[i], " want ", want[i], " (|diff| ", std::fabs(g[i] - want[i]), ");");
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << g.size() << " elements differ (rtol " << rtol << ", atol "
                                       << atol << "):" << msg;
}

// Expects `fn` to throw T whose message contains `needle`.
template <typename E = InvalidArgument>
::testing::AssertionResult throws_with(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
  } catch (const E& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message '" << e.what() << "' lacks '" << needle << "'";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception (expected one mentioning '" << needle << "')";
}

}  // namespace dt::kernels::ops_test
