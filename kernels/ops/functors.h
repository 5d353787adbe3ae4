// Internal to kernels/ops: the scalar math of every elementwise op, shared by the CPU loops and the CUDA kernels.
// C is the compute type (float for f16/bf16/f32, double for f64, the integer type itself for integers).
// Math calls are qualified (::expf ...) because dt::kernels declares tensor ops with the same names.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/macros.h"
#include "kernels/ops/elementwise.h"

namespace dt::kernels::ops_detail {

template <typename C>
inline constexpr bool is_fp_v = std::is_floating_point_v<C>;

// Note [A float exp that vectorizes]
// The CPU loops call exp through m_exp; glibc's expf is a call per element that GCC cannot vectorize without
// -ffast-math, and exp dominates softmax, cross-entropy and SiLU. host_expf is branch-free (selects, no calls) so a
// loop over it vectorizes: Cody-Waite range reduction x = n ln2 + r, a degree-6 polynomial for exp(r) on
// |r| <= ln2/2 (Cephes' expf coefficients, relative error < 2 ulp), and 2^n built in the exponent bits in two halves
// (so n = 128 does not overflow the exponent). Inputs below -87.3 give +0 (true results there are < 1.2e-38:
// subnormals are flushed), above 88.72 +inf, NaN stays NaN. CUDA keeps expf.
inline int32_t float_bits(float f) {
  int32_t i;
  __builtin_memcpy(&i, &f, sizeof i);
  return i;
}
inline float bits_float(int32_t i) {
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}
// t ? a : b as bit masks: a ternary on floats is a branch to GCC (NaN rules), which stops vectorization.
inline float select_float(bool t, float a, float b) {
  const int32_t m = -int32_t(t);
  return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
}
// Always inlined: a call per element would stop the loops around it from vectorizing.
__attribute__((always_inline)) inline float host_expf(float x) {
  float c = select_float(x < -87.3f, -87.3f, x);
  c = select_float(c > 88.72f, 88.72f, c);
  const float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t ni = int32_t(n);
  const int32_t half = ni >> 1;
  float v = y * bits_float((half + 127) << 23) * bits_float((ni - half + 127) << 23);
  v = select_float(x < -87.3f, 0.0f, v);
  v = select_float(x > 88.72f, __builtin_inff(), v);
  return select_float(x != x, x, v);
}

// Note [A float erf that vectorizes]
// GELU (erf form) calls erf per element forward and backward; glibc's erff is a call GCC cannot vectorize, and in a
// GELU MLP it cost a fifth of the CPU step. host_erff is branch-free like host_expf: for |x| <= 0.921875,
// erf(x) = x * P(x^2) with P of degree 5; above, erf(|x|) = 1 - exp(R(|x|)) with R of degree 8 fitted to
// log(erfc(t)) on [0.921875, 4] (|x| is clamped to 4, where 1 - erfc rounds to 1 in float). Both were fitted for
// this file by least squares on Chebyshev nodes (relative error 1.8e-7 below the split, absolute 6.2e-8 above,
// before host_expf's); tests/kernels/ops/elementwise_test.cc checks erf and GELU against double on a dense grid.
// The sign is copied back; NaN stays NaN. CUDA keeps erff.
__attribute__((always_inline)) inline float host_erff(float x) {
  const float t = select_float(x < 0.0f, -x, x);
  const float s = x * x;
  float p = -6.024102331139147e-4f;
  p = p * s + 5.000777076929808e-3f;
  p = p * s + -2.677285671234131e-2f;
  p = p * s + 1.1282035708427429e-1f;
  p = p * s + -3.761252462863922e-1f;
  p = p * s + 1.1283791065216064f;
  const float small = x * p;
  const float u = select_float(t > 4.0f, 4.0f, select_float(t < 0.921875f, 0.921875f, t));
  float r = 1.6131018583109835e-6f;
  r = r * u + -4.557118518278003e-5f;
  r = r * u + 5.926017183810472e-4f;
  r = r * u + -4.739417694509029e-3f;
  r = r * u + 2.6362380012869835e-2f;
  r = r * u + -1.0997404903173447e-1f;
  r = r * u + -6.319416165351868e-1f;
  r = r * u + -1.1301640272140503f;
  r = r * u + 3.025418263860047e-4f;
  const float large = 1.0f - host_expf(r);
  const float v = select_float(t <= 0.921875f, small, select_float(x < 0.0f, -large, large));
  return select_float(x != x, x, v);
}

#if defined(__CUDA_ARCH__)
DT_HOST_DEVICE inline float m_exp(float x) { return ::expf(x); }
#else
DT_HOST_DEVICE inline float m_exp(float x) { return host_expf(x); }
#endif
DT_HOST_DEVICE inline double m_exp(double x) { return ::exp(x); }
DT_HOST_DEVICE inline float m_log(float x) { return ::logf(x); }
DT_HOST_DEVICE inline double m_log(double x) { return ::log(x); }
DT_HOST_DEVICE inline float m_sqrt(float x) { return ::sqrtf(x); }
DT_HOST_DEVICE inline double m_sqrt(double x) { return ::sqrt(x); }
DT_HOST_DEVICE inline float m_tanh(float x) { return ::tanhf(x); }
DT_HOST_DEVICE inline double m_tanh(double x) { return ::tanh(x); }
#if defined(__CUDA_ARCH__)
DT_HOST_DEVICE inline float m_erf(float x) { return ::erff(x); }
#else
DT_HOST_DEVICE inline float m_erf(float x) { return host_erff(x); }
#endif
DT_HOST_DEVICE inline double m_erf(double x) { return ::erf(x); }
DT_HOST_DEVICE inline float m_pow(float x, float y) { return ::powf(x, y); }
DT_HOST_DEVICE inline double m_pow(double x, double y) { return ::pow(x, y); }

template <typename C>
DT_HOST_DEVICE inline bool is_nan(C x) {
  if constexpr (is_fp_v<C>)
    return x != x;
  else
    return false;
}

template <typename C>
DT_HOST_DEVICE inline C m_sigmoid(C x) {
  return C(1) / (C(1) + m_exp(-x));
}

// Whether an op needs a floating dtype (checked at the entry; the loops instantiate only valid combinations).
constexpr bool unary_needs_float(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kRelu:
    case UnaryOp::kAddScalar:
    case UnaryOp::kSubScalar:
    case UnaryOp::kRsubScalar:
    case UnaryOp::kMulScalar:
      return false;
    default:
      return true;
  }
}
constexpr bool binary_needs_float(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
    case BinaryOp::kMul:
    case BinaryOp::kMaximum:
    case BinaryOp::kMinimum:
    case BinaryOp::kReluBackward:
    case BinaryOp::kAbsBackward:
      return false;
    default:
      return true;
  }
}

inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCoef = 0.044715;

template <UnaryOp op, typename C>
DT_HOST_DEVICE inline C unary_apply(C x, C s) {
  if constexpr (op == UnaryOp::kNeg) {
    return C(-x);
  } else if constexpr (op == UnaryOp::kAbs) {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(-x) : x;
  } else if constexpr (op == UnaryOp::kRelu) {
    return x > C(0) ? x : (is_nan(x) ? x : C(0));  // NaN stays NaN, as torch
  } else if constexpr (op == UnaryOp::kAddScalar) {
    return C(x + s);
  } else if constexpr (op == UnaryOp::kSubScalar) {
    return C(x - s);
  } else if constexpr (op == UnaryOp::kRsubScalar) {
    return C(s - x);
  } else if constexpr (op == UnaryOp::kMulScalar) {
    return C(x * s);
  } else if constexpr (!is_fp_v<C>) {
    return C(0);  // unreachable: floating-only ops are rejected at the entry
  } else if constexpr (op == UnaryOp::kExp) {
    return m_exp(x);
  } else if constexpr (op == UnaryOp::kLog) {
    return m_log(x);
  } else if constexpr (op == UnaryOp::kSqrt) {
    return m_sqrt(x);
  } else if constexpr (op == UnaryOp::kRsqrt) {
    return C(1) / m_sqrt(x);
  } else if constexpr (op == UnaryOp::kTanh) {
    return m_tanh(x);
  } else if constexpr (op == UnaryOp::kSigmoid) {
    return m_sigmoid(x);
  } else if constexpr (op == UnaryOp::kSilu) {
    return x * m_sigmoid(x);
  } else if constexpr (op == UnaryOp::kGeluErf) {
    return C(0.5) * x * (C(1) + m_erf(x * C(kSqrt1_2)));
  } else if constexpr (op == UnaryOp::kGeluTanh) {
    C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
    return C(0.5) * x * (C(1) + m_tanh(inner));
  } else if constexpr (op == UnaryOp::kDivScalar) {
    return x / s;
  } else if constexpr (op == UnaryOp::kPowScalar) {
    return m_pow(x, s);
  } else {
    static_assert(op == UnaryOp::kPowScalar, "unhandled UnaryOp");
    return x;
  }
}

template <BinaryOp op, typename C>
DT_HOST_DEVICE inline C binary_apply(C a, C b, C s) {
  if constexpr (op == BinaryOp::kAdd) {
    return C(a + b);
  } else if constexpr (op == BinaryOp::kSub) {
    return C(a - b);
  } else if constexpr (op == BinaryOp::kMul) {
    return C(a * b);
  } else if constexpr (op == BinaryOp::kMaximum) {
    return is_nan(a) ? a : (is_nan(b) ? b : (a < b ? b : a));
  } else if constexpr (op == BinaryOp::kMinimum) {
    return is_nan(a) ? a : (is_nan(b) ? b : (b < a ? b : a));
  } else if constexpr (op == BinaryOp::kReluBackward) {
    return b > C(0) ? a : C(0);
  } else if constexpr (op == BinaryOp::kAbsBackward) {
    if constexpr (std::is_unsigned_v<C>)
      return b > C(0) ? a : C(0);
    else
      return b > C(0) ? a : (b < C(0) ? C(-a) : C(0));
  } else if constexpr (!is_fp_v<C>) {
    return C(0);  // unreachable: floating-only ops are rejected at the entry
  } else if constexpr (op == BinaryOp::kDiv) {
    return a / b;
  } else if constexpr (op == BinaryOp::kPow) {
    return m_pow(a, b);
  } else if constexpr (op == BinaryOp::kSigmoidBackward) {
    return a * b * (C(1) - b);
  } else if constexpr (op == BinaryOp::kTanhBackward) {
    return a * (C(1) - b * b);
  } else if constexpr (op == BinaryOp::kSqrtBackward) {
    return a / (C(2) * b);
  } else if constexpr (op == BinaryOp::kRsqrtBackward) {
    return C(-0.5) * a * b * b * b;
  } else if constexpr (op == BinaryOp::kSiluBackward) {
    C sg = m_sigmoid(b);
    return a * sg * (C(1) + b * (C(1) - sg));
  } else if constexpr (op == BinaryOp::kGeluErfBackward) {
    C cdf = C(0.5) * (C(1) + m_erf(b * C(kSqrt1_2)));
    C pdf = C(kInvSqrt2Pi) * m_exp(C(-0.5) * b * b);
    return a * (cdf + b * pdf);
  } else if constexpr (op == BinaryOp::kGeluTanhBackward) {
    C b2 = b * b;
    C inner = C(kSqrt2OverPi) * (b + C(kGeluCoef) * b2 * b);
    C t = m_tanh(inner);
    C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * b2);
    return a * (C(0.5) * (C(1) + t) + C(0.5) * b * (C(1) - t * t) * dinner);
  } else if constexpr (op == BinaryOp::kPowScalarBackward) {
    return s == C(0) ? C(0) : a * s * m_pow(b, s - C(1));
  } else if constexpr (op == BinaryOp::kPowExponentGrad) {
    return (a == C(0) && b >= C(0)) ? C(0) : m_pow(a, b) * m_log(a);
  } else {
    static_assert(op == BinaryOp::kPowExponentGrad, "unhandled BinaryOp");
    return a;
  }
}

template <CompareOp op, typename C>
DT_HOST_DEVICE inline bool compare_apply(C a, C b) {
  if constexpr (op == CompareOp::kEq)
    return a == b;
  else if constexpr (op == CompareOp::kNe)
    return a != b;
  else if constexpr (op == CompareOp::kLt)
    return a < b;
  else if constexpr (op == CompareOp::kLe)
    return a <= b;
  else if constexpr (op == CompareOp::kGt)
    return a > b;
  else
    return a >= b;
}

// Calls fn.template operator()<op>() with the op as a compile-time constant.
// clang-format off
template <typename Fn>
void dispatch_unary_op(UnaryOp op, Fn&& fn) {
  switch (op) {
#define DT_U_(name) case UnaryOp::name: return fn.template operator()<UnaryOp::name>();
    DT_U_(kNeg) DT_U_(kAbs) DT_U_(kRelu) DT_U_(kExp) DT_U_(kLog) DT_U_(kSqrt) DT_U_(kRsqrt) DT_U_(kTanh)
    DT_U_(kSigmoid) DT_U_(kSilu) DT_U_(kGeluErf) DT_U_(kGeluTanh) DT_U_(kAddScalar) DT_U_(kSubScalar)
    DT_U_(kRsubScalar) DT_U_(kMulScalar) DT_U_(kDivScalar) DT_U_(kPowScalar)
#undef DT_U_
  }
}
template <typename Fn>
void dispatch_binary_op(BinaryOp op, Fn&& fn) {
  switch (op) {
#define DT_B_(name) case BinaryOp::name: return fn.template operator()<BinaryOp::name>();
    DT_B_(kAdd) DT_B_(kSub) DT_B_(kMul) DT_B_(kDiv) DT_B_(kPow) DT_B_(kMaximum) DT_B_(kMinimum) DT_B_(kReluBackward)
    DT_B_(kSigmoidBackward) DT_B_(kTanhBackward) DT_B_(kSqrtBackward) DT_B_(kRsqrtBackward) DT_B_(kSiluBackward)
    DT_B_(kGeluErfBackward) DT_B_(kGeluTanhBackward) DT_B_(kAbsBackward) DT_B_(kPowScalarBackward)
    DT_B_(kPowExponentGrad)
#undef DT_B_
  }
}
// clang-format on
template <typename Fn>
void dispatch_compare_op(CompareOp op, Fn&& fn) {
  switch (op) {
    case CompareOp::kEq:
      return fn.template operator()<CompareOp::kEq>();
    case CompareOp::kNe:
      return fn.template operator()<CompareOp::kNe>();
    case CompareOp::kLt:
      return fn.template operator()<CompareOp::kLt>();
    case CompareOp::kLe:
      return fn.template operator()<CompareOp::kLe>();
    case CompareOp::kGt:
      return fn.template operator()<CompareOp::kGt>();
    case CompareOp::kGe:
      return fn.template operator()<CompareOp::kGe>();
  }
}

// Calls fn.template operator()<T>() for a floating dtype (f32, f64, f16, bf16); other dtypes are a bug here.
template <typename Fn>
void dispatch_float_dtype(const char* op, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    case DType::f16:
      return fn.template operator()<Half>();
    case DType::bf16:
      return fn.template operator()<BFloat16>();
    default:
      DT_ASSERT(false, op, " reached a kernel with dtype ", dtype_name(dt));
  }
}

// Numeric (non-bool) dtypes: float types and integers. Used to limit instantiations.
template <typename T>
inline constexpr bool is_numeric_v = !std::is_same_v<T, bool>;

}  // namespace dt::kernels::ops_detail
