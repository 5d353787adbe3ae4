// Element conversion shared by cast, copy_cast, fill and chunk-cat (host and device).
//
// Semantics (the same on CPU and CUDA): f16 and bf16 convert through float, rounding to nearest even (so f64 ->
// f16 rounds twice, f64 -> f32 -> f16); to bool is `v != 0` (NaN is true); from bool is 0 or 1; floating to
// integer truncates toward zero; integer to integer wraps (two's complement). Values outside the destination's
// range (NaN, infinities or out-of-range numbers to an integer) are undefined, as in C++ and PyTorch.
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "core/macros.h"

namespace dt::kernels {

template <typename T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename D, typename S>
DT_HOST_DEVICE inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (is_16bit_float_v<S>) {
    return convert<D, float>(static_cast<float>(v));
  } else if constexpr (is_16bit_float_v<D>) {
    return D(convert<float, S>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace dt::kernels
