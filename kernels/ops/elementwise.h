// Elementwise ops with torch broadcasting, and their backward kernels.
//
// Dtypes: the inputs of a binary op must have the same dtype (no type promotion; convert with Tensor::to) and the
// result has that dtype; comparisons return bool. f16/bf16 are computed in float, f32 in float, f64 in double,
// integers in their own type. Transcendental ops (exp, log, sqrt, rsqrt, tanh, sigmoid, silu, gelu, div, pow) need
// a floating dtype; neg, abs, relu, add, sub, mul, maximum, minimum and the scalar ops also take integers (a scalar
// must then be integer-valued); bool takes only comparisons, where and masked_fill. Inputs may be non-contiguous
// and broadcast (stride 0); results are new contiguous tensors. CUDA work is queued on `stream`.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace dt::kernels {

enum class UnaryOp : uint8_t {
  kNeg,
  kAbs,
  kRelu,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kSigmoid,
  kSilu,
  kGeluErf,
  kGeluTanh,
  // with a scalar s:
  kAddScalar,   // x + s
  kSubScalar,   // x - s
  kRsubScalar,  // s - x
  kMulScalar,   // x * s
  kDivScalar,   // x / s (floating only)
  kPowScalar,   // x ^ s (floating only)
};

enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,  // NaN-propagating, as torch.maximum
  kMinimum,
  // Backward helpers: a = grad_out, b = the saved tensor named; result = grad wrt the op's input.
  kReluBackward,       // b = input or output of relu
  kSigmoidBackward,    // b = output
  kTanhBackward,       // b = output
  kSqrtBackward,       // b = output
  kRsqrtBackward,      // b = output
  kSiluBackward,       // b = input
  kGeluErfBackward,    // b = input
  kGeluTanhBackward,   // b = input
  kAbsBackward,        // b = input
  kPowScalarBackward,  // b = input, scalar = exponent
  kPowExponentGrad,    // a = base, b = exponent: a^b * log(a), 0 where a == 0 and b >= 0 (d(a^b)/db)
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

enum class GeluApprox : uint8_t { kNone, kTanh };  // erf form (exact) or tanh approximation

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* compare_op_name(CompareOp op);

// ---- generic entry points (every named op below goes through one of these) ----
Tensor unary(UnaryOp op, const Tensor& x, double scalar = 0, Stream stream = {});
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, double scalar = 0, Stream stream = {});
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b, Stream stream = {});
Tensor compare_scalar(CompareOp op, const Tensor& a, double scalar, Stream stream = {});  // compared in double

// ---- forward ----
Tensor add(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor sub(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor mul(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor div(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor pow(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor maximum(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor minimum(const Tensor& a, const Tensor& b, Stream stream = {});

Tensor neg(const Tensor& x, Stream stream = {});
Tensor abs(const Tensor& x, Stream stream = {});
Tensor relu(const Tensor& x, Stream stream = {});
Tensor exp(const Tensor& x, Stream stream = {});
Tensor log(const Tensor& x, Stream stream = {});
Tensor sqrt(const Tensor& x, Stream stream = {});
Tensor rsqrt(const Tensor& x, Stream stream = {});
Tensor tanh(const Tensor& x, Stream stream = {});
Tensor sigmoid(const Tensor& x, Stream stream = {});
Tensor silu(const Tensor& x, Stream stream = {});
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::kNone, Stream stream = {});

Tensor add_scalar(const Tensor& x, double s, Stream stream = {});
Tensor sub_scalar(const Tensor& x, double s, Stream stream = {});
Tensor rsub_scalar(const Tensor& x, double s, Stream stream = {});  // s - x
Tensor mul_scalar(const Tensor& x, double s, Stream stream = {});
Tensor div_scalar(const Tensor& x, double s, Stream stream = {});
Tensor pow_scalar(const Tensor& x, double s, Stream stream = {});

Tensor eq(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor ne(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor lt(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor le(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor gt(const Tensor& a, const Tensor& b, Stream stream = {});
Tensor ge(const Tensor& a, const Tensor& b, Stream stream = {});

// cond ? a : b with cond a bool tensor; the three shapes broadcast together; a and b share a dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Stream stream = {});
// x with `value` where mask (bool, broadcastable to x's shape) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Stream stream = {});

// ---- backward ----
// Sums grad over the dims that broadcasting expanded, so that the result has `shape` (which must broadcast to
// grad's shape). Returns grad itself when the shapes already match.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape, Stream stream = {});

struct BinaryGrads {
  Tensor grad_a;
  Tensor grad_b;
};
BinaryGrads add_backward(const Tensor& grad_out, const Shape& a_shape, const Shape& b_shape, Stream stream = {});
BinaryGrads sub_backward(const Tensor& grad_out, const Shape& a_shape, const Shape& b_shape, Stream stream = {});
BinaryGrads mul_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, Stream stream = {});
BinaryGrads div_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, Stream stream = {});
BinaryGrads pow_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, Stream stream = {});
// grad_a = grad where cond, else 0; grad_b the opposite; each summed to its input's shape.
BinaryGrads where_backward(const Tensor& grad_out, const Tensor& cond, const Shape& a_shape, const Shape& b_shape,
                           Stream stream = {});
Tensor masked_fill_backward(const Tensor& grad_out, const Tensor& mask, Stream stream = {});

Tensor neg_backward(const Tensor& grad_out, Stream stream = {});
Tensor abs_backward(const Tensor& grad_out, const Tensor& x, Stream stream = {});
Tensor relu_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});  // out or input: same mask
Tensor exp_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});
Tensor log_backward(const Tensor& grad_out, const Tensor& x, Stream stream = {});
Tensor sqrt_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});
Tensor rsqrt_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});
Tensor tanh_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});
Tensor sigmoid_backward(const Tensor& grad_out, const Tensor& out, Stream stream = {});
Tensor silu_backward(const Tensor& grad_out, const Tensor& x, Stream stream = {});
Tensor gelu_backward(const Tensor& grad_out, const Tensor& x, GeluApprox approx = GeluApprox::kNone,
                     Stream stream = {});
Tensor pow_scalar_backward(const Tensor& grad_out, const Tensor& x, double exponent, Stream stream = {});
// The other scalar ops: add_scalar/sub_scalar pass grad through, rsub_scalar is neg_backward, mul_scalar and
// div_scalar scale the gradient by s and 1/s (call mul_scalar / div_scalar on grad_out).

namespace cpu {
// Arguments validated; `out` is contiguous with the broadcast shape, inputs are expanded to it.
void unary(UnaryOp op, const Tensor& out, const Tensor& x, double scalar);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double scalar);
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double scalar);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
}  // namespace cpu

namespace cuda {
void unary(UnaryOp op, const Tensor& out, const Tensor& x, double scalar, Stream stream);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double scalar, Stream stream);
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b, Stream stream);
void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double scalar, Stream stream);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
