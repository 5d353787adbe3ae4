// CPU reductions over the canonical [outer, red, inner] block. Rows (inner == 1) are summed with 8 partial sums
// (vectorisable and more accurate than one running sum); inner > 1 accumulates whole inner rows at a time.
#include "kernels/ops/reduction.h"

#include <type_traits>
#include <vector>

#include "kernels/ops/functors.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {

template <typename T>
using sum_acc_t = std::conditional_t<is_fp_v<acc_t<T>>, acc_t<T>, int64_t>;

template <typename T, typename O>
void reduce_sum(const T* x, O* out, int64_t outer, int64_t red, int64_t inner, bool mean) {
  using A = sum_acc_t<T>;
  auto finish = [&](A v) -> O {
    if constexpr (is_fp_v<A>) {
      if (mean) return O(v / A(red));
    }
    return O(v);
  };
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * red;
      A part[8] = {};
      int64_t r = 0;
      for (; r + 8 <= red; r += 8)
        for (int k = 0; k < 8; ++k) part[k] += A(row[r + k]);
      for (; r < red; ++r) part[0] += A(row[r]);
      A s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      out[o] = finish(s);
    }
    return;
  }
  std::vector<A> acc(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), A(0));
    const T* blk = x + o * red * inner;
    for (int64_t r = 0; r < red; ++r) {
      const T* row = blk + r * inner;
      for (int64_t i = 0; i < inner; ++i) acc[size_t(i)] += A(row[i]);
    }
    for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = finish(acc[size_t(i)]);
  }
}

// Whether v replaces the current best: strictly better, or the first NaN.
template <bool kMax, typename C>
inline bool better(C v, C best) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return kMax ? v > best : v < best;
}

template <bool kMax, typename T>
void reduce_minmax(const T* x, T* out, int64_t* idx, int64_t outer, int64_t red, int64_t inner) {
  using C = acc_t<T>;
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * red;
      C best = C(row[0]);
      int64_t bi = 0;
      for (int64_t r = 1; r < red; ++r) {
        C v = C(row[r]);
        if (better<kMax>(v, best)) {
          best = v;
          bi = r;
        }
      }
      out[o] = row[bi];
      if (idx) idx[o] = bi;
    }
    return;
  }
  std::vector<C> best(static_cast<size_t>(inner));
  std::vector<int64_t> bi(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* blk = x + o * red * inner;
    for (int64_t i = 0; i < inner; ++i) {
      best[size_t(i)] = C(blk[i]);
      bi[size_t(i)] = 0;
    }
    for (int64_t r = 1; r < red; ++r) {
      const T* row = blk + r * inner;
      for (int64_t i = 0; i < inner; ++i) {
        C v = C(row[i]);
        if (better<kMax, C>(v, best[size_t(i)])) {
          best[size_t(i)] = v;
          bi[size_t(i)] = r;
        }
      }
    }
    for (int64_t i = 0; i < inner; ++i) {
      out[o * inner + i] = blk[bi[size_t(i)] * inner + i];
      if (idx) idx[o * inner + i] = bi[size_t(i)];
    }
  }
}

}  // namespace

void reduce(ReduceKind kind, const Tensor& x, int64_t outer, int64_t red, int64_t inner, const Tensor& out,
            const Tensor& indices) {
  DT_ASSERT(x.is_contiguous() && out.is_contiguous() && red > 0);
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    if (kind == ReduceKind::kSum || kind == ReduceKind::kMean) {
      if constexpr (is_fp_v<acc_t<T>>) {
        reduce_sum<T, T>(px, out.data<T>(), outer, red, inner, kind == ReduceKind::kMean);
      } else {
        reduce_sum<T, int64_t>(px, out.data<int64_t>(), outer, red, inner, false);
      }
    } else {
      int64_t* pi = indices.defined() ? indices.data<int64_t>() : nullptr;
      if (kind == ReduceKind::kMax)
        reduce_minmax<true, T>(px, out.data<T>(), pi, outer, red, inner);
      else
        reduce_minmax<false, T>(px, out.data<T>(), pi, outer, red, inner);
    }
  });
}

}  // namespace dt::kernels::cpu
