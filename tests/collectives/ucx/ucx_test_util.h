// Helpers of the UCX multi-process tests: every rank regenerates every rank's input from (seed, rank, index), so it
// can compute the reference of any collective on its own, in double precision.
//
// Tolerance: the UCX algorithms combine in their own order (ring, recursive doubling) and round to the dtype at every
// step, so floating-point sums and products are compared with a bound of (n + 1) rounding errors of the dtype on the
// magnitude involved; max, min and every integer result are exact.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/splitmix.h"

namespace dt::ucx_test {

inline uint64_t mix(uint64_t x) { return splitmix64(x); }

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Element i of rank r's input for case `seed`, suited to `op` (products stay near 1, integers small).
template <typename T>
T gen(uint64_t seed, int rank, int64_t i, ReduceOp op = ReduceOp::kSum) {
  const uint64_t h = mix(mix(seed * 1000003ull + uint64_t(rank)) ^ uint64_t(i));
  const double u = double(h >> 11) * 0x1.0p-53;
  if constexpr (kIsFloat<T>) {
    if (op == ReduceOp::kProduct) return from_double<T>(((h & 1) ? -1.0 : 1.0) * (0.5 + u));
    return from_double<T>(u * 8.0 - 4.0);
  } else {
    if (op == ReduceOp::kProduct) return T(int64_t(h % 3) - 1 == 0 ? 2 : int64_t(h % 3) - 1);  // -1, 2, 1
    return T(int64_t(h % 2001) - 1000);
  }
}

template <typename T>
double eps_of() {
  if constexpr (std::is_same_v<T, float>) return 0x1.0p-23;
  if constexpr (std::is_same_v<T, double>) return 0x1.0p-52;
  if constexpr (std::is_same_v<T, Half>) return 0x1.0p-10;
  if constexpr (std::is_same_v<T, BFloat16>) return 0x1.0p-7;
  return 0;
}

// The reduction over ranks 0..n-1 of element i (inputs from gen), with its tolerance.
template <typename T>
struct Expect {
  double value = 0;
  double tol = 0;
};

template <typename T>
Expect<T> reduce_ref(uint64_t seed, int n, int64_t i, ReduceOp op) {
  Expect<T> e;
  double acc = 0, mag = 0;
  if constexpr (kIsFloat<T>) {
    for (int r = 0; r < n; ++r) {
      const double x = to_double(gen<T>(seed, r, i, op));
      if (r == 0) {
        acc = x;
      } else {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            acc += x;
            break;
          case ReduceOp::kProduct:
            acc *= x;
            break;
          case ReduceOp::kMax:
            acc = std::max(acc, x);
            break;
          case ReduceOp::kMin:
            acc = std::min(acc, x);
            break;
        }
      }
      mag += std::fabs(x);
    }
    if (op == ReduceOp::kAvg) {
      acc /= n;
      mag /= n;
    }
    if (op == ReduceOp::kProduct) mag = std::fabs(acc);
    if (op == ReduceOp::kMax || op == ReduceOp::kMin) mag = 0;
    e.value = acc;
    e.tol = double(n + 1) * eps_of<T>() * mag;
  } else {
    int64_t a = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t x = int64_t(gen<T>(seed, r, i, op));
      if (r == 0) {
        a = x;
        continue;
      }
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          a += x;
          break;
        case ReduceOp::kProduct:
          a *= x;
          break;
        case ReduceOp::kMax:
          a = std::max(a, x);
          break;
        case ReduceOp::kMin:
          a = std::min(a, x);
          break;
      }
    }
    if (op == ReduceOp::kAvg) a /= n;  // truncating, like ncclAvg
    e.value = double(a);
  }
  return e;
}

// Compares got[i] with the expectation; reports at most a few mismatches. Returns the number of bad elements.
template <typename T>
int64_t count_bad(const std::string& what, const T* got, int64_t count, const std::function<Expect<T>(int64_t)>& ref) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Expect<T> e = ref(i);
    const double g = to_double(got[i]);
    const bool ok = kIsFloat<T> ? std::fabs(g - e.value) <= e.tol : g == e.value;
    if (!ok) {
      if (bad < 3)
        ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << e.value << " (tol " << e.tol
                      << ")";
      ++bad;
    }
  }
  return bad;
}

}  // namespace dt::ucx_test
