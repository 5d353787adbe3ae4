// The scalar arithmetic of each ReduceOp, shared by the CPU and CUDA kernels (host/device inline).
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "core/macros.h"
#include "core/reduce_op.h"

namespace dt::kernels {

// The type in which sums and products are computed: the accumulation type, but unsigned for integers.
template <typename T, bool = std::is_integral_v<T>>
struct WrapType {
  using type = acc_t<T>;
};
template <typename T>
struct WrapType<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
DT_HOST_DEVICE inline T apply_reduce(ReduceOp op, T a, T b) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case ReduceOp::kMin:
      case ReduceOp::kProduct:
        return a && b;
      default:
        return a || b;
    }
  } else {
    A x = static_cast<A>(a), y = static_cast<A>(b);
    // Integers wrap (two's complement) on overflow: computed in the unsigned type, where wrapping is defined.
    using W = typename WrapType<T>::type;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return T(W(W(x) + W(y)));
      case ReduceOp::kProduct:
        return T(W(W(x) * W(y)));
      case ReduceOp::kMax:
        return (x != x || x > y) ? a : b;  // NaN propagates, as torch.maximum
      case ReduceOp::kMin:
        return (x != x || x < y) ? a : b;
    }
    return a;
  }
}

template <typename T>
DT_HOST_DEVICE inline T apply_divide(T x, int64_t divisor) {
  if constexpr (std::is_same_v<T, bool>) {
    return x;
  } else {
    using A = acc_t<T>;
    if constexpr (std::is_floating_point_v<A>)
      return T(static_cast<A>(x) / static_cast<A>(divisor));
    else
      return T(static_cast<int64_t>(x) / divisor);
  }
}

}  // namespace dt::kernels
