// Type promotion for binary elementwise ops, torch's rule, written once (the DTensor elementwise ops apply it; the
// kernels themselves take operands of one dtype):
//
//   - kinds are ordered bool < integers < floating; a mixed pair takes the higher kind's dtype (i32 with f16 -> f16,
//     bool with u8 -> u8);
//   - within a kind, the wider dtype (f16 with f32 -> f32, i8 with i64 -> i64); f16 with bf16 -> f32; u8 with i8 ->
//     i32 (torch gives i16, which dtensor lacks: i32 is the narrowest signed type holding both);
//   - a double scalar does not promote a floating tensor (x_f16 * 2.0 stays f16); a bool or integer tensor with a
//     scalar that is not integer-valued becomes f32 (torch's default float dtype), with an integer-valued scalar it
//     keeps its dtype (bool becomes i64, as a Python int does).
#pragma once

#include <cmath>

#include "core/dtype.h"

namespace dt::kernels {

constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::b8) return b;
  if (b == DType::b8) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i32;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

inline DType promote_with_scalar(DType t, double scalar) {
  if (is_floating(t)) return t;
  if (!std::isfinite(scalar) || std::trunc(scalar) != scalar) return DType::f32;
  return t == DType::b8 ? DType::i64 : t;
}

}  // namespace dt::kernels
