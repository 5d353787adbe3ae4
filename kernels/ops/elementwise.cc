#include "kernels/ops/elementwise.h"

#include <cmath>

#include "core/allocator.h"
#include "kernels/ops/common.h"
#include "kernels/ops/functors.h"
#include "kernels/ops/reduction.h"

namespace dt::kernels {

using namespace ops_detail;

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
      return "neg";
    case UnaryOp::kAbs:
      return "abs";
    case UnaryOp::kRelu:
      return "relu";
    case UnaryOp::kExp:
      return "exp";
    case UnaryOp::kLog:
      return "log";
    case UnaryOp::kSqrt:
      return "sqrt";
    case UnaryOp::kRsqrt:
      return "rsqrt";
    case UnaryOp::kTanh:
      return "tanh";
    case UnaryOp::kSigmoid:
      return "sigmoid";
    case UnaryOp::kSilu:
      return "silu";
    case UnaryOp::kGeluErf:
      return "gelu";
    case UnaryOp::kGeluTanh:
      return "gelu(tanh)";
    case UnaryOp::kAddScalar:
      return "add_scalar";
    case UnaryOp::kSubScalar:
      return "sub_scalar";
    case UnaryOp::kRsubScalar:
      return "rsub_scalar";
    case UnaryOp::kMulScalar:
      return "mul_scalar";
    case UnaryOp::kDivScalar:
      return "div_scalar";
    case UnaryOp::kPowScalar:
      return "pow_scalar";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
    case BinaryOp::kPow:
      return "pow";
    case BinaryOp::kMaximum:
      return "maximum";
    case BinaryOp::kMinimum:
      return "minimum";
    case BinaryOp::kReluBackward:
      return "relu_backward";
    case BinaryOp::kSigmoidBackward:
      return "sigmoid_backward";
    case BinaryOp::kTanhBackward:
      return "tanh_backward";
    case BinaryOp::kSqrtBackward:
      return "sqrt_backward";
    case BinaryOp::kRsqrtBackward:
      return "rsqrt_backward";
    case BinaryOp::kSiluBackward:
      return "silu_backward";
    case BinaryOp::kGeluErfBackward:
      return "gelu_backward";
    case BinaryOp::kGeluTanhBackward:
      return "gelu_backward(tanh)";
    case BinaryOp::kAbsBackward:
      return "abs_backward";
    case BinaryOp::kPowScalarBackward:
      return "pow_scalar_backward";
    case BinaryOp::kPowExponentGrad:
      return "pow_exponent_grad";
  }
  return "?";
}

const char* compare_op_name(CompareOp op) {
  switch (op) {
    case CompareOp::kEq:
      return "eq";
    case CompareOp::kNe:
      return "ne";
    case CompareOp::kLt:
      return "lt";
    case CompareOp::kLe:
      return "le";
    case CompareOp::kGt:
      return "gt";
    case CompareOp::kGe:
      return "ge";
  }
  return "?";
}

namespace {

void check_arith_dtype(const char* op, const Tensor& t, const char* name, bool needs_float) {
  DT_CHECK_ARG(t.dtype() != DType::b8, op, ": ", name,
               " has dtype bool, which supports only comparisons, where "
               "and masked_fill (convert with Tensor::to)");
  if (needs_float) check_floating(op, t, name);
}

void check_scalar_for(const char* op, DType dtype, double s) {
  if (is_floating(dtype)) return;
  DT_CHECK_ARG(std::isfinite(s) && std::trunc(s) == s, op, ": scalar ", s, " is not an integer, but the tensor has ",
               "integer dtype ", dtype_name(dtype), " (convert the tensor to a floating dtype first)");
}

}  // namespace

// ---- generic entry points ----

Tensor unary(UnaryOp op, const Tensor& x, double scalar, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  const char* name = unary_op_name(op);
  check_defined(x, name, "x");
  check_arith_dtype(name, x, "x", unary_needs_float(op));
  check_scalar_for(name, x.dtype(), scalar);
  Device dev = x.device();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), dev);
  if (out.numel() == 0) return out;
  DT_OPS_DISPATCH(dev, name, cpu::unary(op, out, x, scalar), cuda::unary(op, out, x, scalar, stream));
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, double scalar, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(a), stream);
  const char* name = binary_op_name(op);
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  Device dev = common_device(name, {&a, &b}, {"a", "b"});
  check_same_dtype(name, a, "a", b, "b");
  check_arith_dtype(name, a, "a", binary_needs_float(op));
  check_scalar_for(name, a.dtype(), scalar);
  Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), dev);
  if (out.numel() == 0) return out;
  Tensor ae = a.expand(shape), be = b.expand(shape);
  DT_OPS_DISPATCH(dev, name, cpu::binary(op, out, ae, be, scalar), cuda::binary(op, out, ae, be, scalar, stream));
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(a), stream);
  const char* name = compare_op_name(op);
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  Device dev = common_device(name, {&a, &b}, {"a", "b"});
  check_same_dtype(name, a, "a", b, "b");
  Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, DType::b8, dev);
  if (out.numel() == 0) return out;
  Tensor ae = a.expand(shape), be = b.expand(shape);
  DT_OPS_DISPATCH(dev, name, cpu::compare(op, out, ae, be), cuda::compare(op, out, ae, be, stream));
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double scalar, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(a), stream);
  const char* name = compare_op_name(op);
  check_defined(a, name, "a");
  Device dev = a.device();
  Tensor out = Tensor::empty(a.shape(), DType::b8, dev);
  if (out.numel() == 0) return out;
  DT_OPS_DISPATCH(dev, name, cpu::compare_scalar(op, out, a, scalar), cuda::compare_scalar(op, out, a, scalar, stream));
  return out;
}

// ---- named forward ops ----

Tensor add(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kAdd, a, b, 0, s); }
Tensor sub(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kSub, a, b, 0, s); }
Tensor mul(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kMul, a, b, 0, s); }
Tensor div(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kDiv, a, b, 0, s); }
Tensor pow(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kPow, a, b, 0, s); }
Tensor maximum(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kMaximum, a, b, 0, s); }
Tensor minimum(const Tensor& a, const Tensor& b, Stream s) { return binary(BinaryOp::kMinimum, a, b, 0, s); }

Tensor neg(const Tensor& x, Stream s) { return unary(UnaryOp::kNeg, x, 0, s); }
Tensor abs(const Tensor& x, Stream s) { return unary(UnaryOp::kAbs, x, 0, s); }
Tensor relu(const Tensor& x, Stream s) { return unary(UnaryOp::kRelu, x, 0, s); }
Tensor exp(const Tensor& x, Stream s) { return unary(UnaryOp::kExp, x, 0, s); }
Tensor log(const Tensor& x, Stream s) { return unary(UnaryOp::kLog, x, 0, s); }
Tensor sqrt(const Tensor& x, Stream s) { return unary(UnaryOp::kSqrt, x, 0, s); }
Tensor rsqrt(const Tensor& x, Stream s) { return unary(UnaryOp::kRsqrt, x, 0, s); }
Tensor tanh(const Tensor& x, Stream s) { return unary(UnaryOp::kTanh, x, 0, s); }
Tensor sigmoid(const Tensor& x, Stream s) { return unary(UnaryOp::kSigmoid, x, 0, s); }
Tensor silu(const Tensor& x, Stream s) { return unary(UnaryOp::kSilu, x, 0, s); }
Tensor gelu(const Tensor& x, GeluApprox approx, Stream s) {
  return unary(approx == GeluApprox::kTanh ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf, x, 0, s);
}

Tensor add_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kAddScalar, x, v, s); }
Tensor sub_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kSubScalar, x, v, s); }
Tensor rsub_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kRsubScalar, x, v, s); }
Tensor mul_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kMulScalar, x, v, s); }
Tensor div_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kDivScalar, x, v, s); }
Tensor pow_scalar(const Tensor& x, double v, Stream s) { return unary(UnaryOp::kPowScalar, x, v, s); }

Tensor eq(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kEq, a, b, s); }
Tensor ne(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kNe, a, b, s); }
Tensor lt(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kLt, a, b, s); }
Tensor le(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kLe, a, b, s); }
Tensor gt(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kGt, a, b, s); }
Tensor ge(const Tensor& a, const Tensor& b, Stream s) { return compare(CompareOp::kGe, a, b, s); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(cond), stream);
  const char* name = "where";
  check_defined(cond, name, "cond");
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  Device dev = common_device(name, {&cond, &a, &b}, {"cond", "a", "b"});
  DT_CHECK_ARG(cond.dtype() == DType::b8, "where: cond must have dtype bool, got ", dtype_name(cond.dtype()));
  check_same_dtype(name, a, "a", b, "b");
  Shape shape = broadcast_shapes(name, broadcast_shapes(name, cond.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), dev);
  if (out.numel() == 0) return out;
  Tensor ce = cond.expand(shape), ae = a.expand(shape), be = b.expand(shape);
  DT_OPS_DISPATCH(dev, name, cpu::where(out, ce, ae, be), cuda::where(out, ce, ae, be, stream));
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  check_defined(x, "masked_fill", "x");
  check_defined(mask, "masked_fill", "mask");
  DT_CHECK_ARG(mask.dtype() == DType::b8, "masked_fill: mask must have dtype bool, got ", dtype_name(mask.dtype()));
  Shape shape = broadcast_shapes("masked_fill", mask.shape(), x.shape());
  DT_CHECK_ARG(shape == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
               " does not broadcast to x's shape ", shape_str(x.shape()));
  common_device("masked_fill", {&x, &mask}, {"x", "mask"});
  check_scalar_for("masked_fill", x.dtype(), value);
  Tensor v = Tensor::full({}, value, x.dtype(), x.device(), stream);
  return where(mask, v, x, stream);
}

// ---- backward ----

Tensor sum_to_shape(const Tensor& grad, const Shape& shape, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad), stream);
  check_defined(grad, "sum_to_shape", "grad");
  if (grad.shape() == shape) return grad;
  const Shape& g = grad.shape();
  DT_CHECK_ARG(shape.size() <= g.size(), "sum_to_shape: target shape ", shape_str(shape), " has more dims than grad ",
               shape_str(g));
  size_t lead = g.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.size(); ++i) {
    if (i < lead) {
      dims.push_back(int64_t(i));
      continue;
    }
    int64_t want = shape[i - lead];
    DT_CHECK_ARG(want == g[i] || want == 1, "sum_to_shape: shape ", shape_str(shape),
                 " does not broadcast to grad's shape ", shape_str(g));
    if (want == 1 && g[i] != 1) dims.push_back(int64_t(i));
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true, stream);
  if (r.dtype() != grad.dtype()) r = r.to(grad.dtype(), stream);
  // keepdim left the reduced dims as 1: drop the leading ones.
  return reshape_contig(r, shape, stream);
}

BinaryGrads add_backward(const Tensor& g, const Shape& a_shape, const Shape& b_shape, Stream s) {
  return {sum_to_shape(g, a_shape, s), sum_to_shape(g, b_shape, s)};
}

BinaryGrads sub_backward(const Tensor& g, const Shape& a_shape, const Shape& b_shape, Stream s) {
  return {sum_to_shape(g, a_shape, s), neg(sum_to_shape(g, b_shape, s), s)};
}

BinaryGrads mul_backward(const Tensor& g, const Tensor& a, const Tensor& b, Stream s) {
  return {sum_to_shape(mul(g, b, s), a.shape(), s), sum_to_shape(mul(g, a, s), b.shape(), s)};
}

BinaryGrads div_backward(const Tensor& g, const Tensor& a, const Tensor& b, Stream s) {
  Tensor ga = div(g, b, s);
  // d(a/b)/db = -a/b^2, computed as -(g/b)*(a/b) so that no b^2 overflows.
  Tensor gb = neg(mul(ga, div(a, b, s), s), s);
  return {sum_to_shape(ga, a.shape(), s), sum_to_shape(gb, b.shape(), s)};
}

BinaryGrads pow_backward(const Tensor& g, const Tensor& a, const Tensor& b, Stream s) {
  // d(a^b)/da = b * a^(b-1), defined as 0 where b == 0 (as torch, so that 0^0 has a zero gradient).
  Tensor da = mul(b, pow(a, sub_scalar(b, 1, s), s), s);
  da = masked_fill(da, compare_scalar(CompareOp::kEq, b, 0, s).expand(da.shape()), 0, s);
  Tensor ga = mul(g, da, s);
  Tensor gb = mul(g, binary(BinaryOp::kPowExponentGrad, a, b, 0, s), s);
  return {sum_to_shape(ga, a.shape(), s), sum_to_shape(gb, b.shape(), s)};
}

BinaryGrads where_backward(const Tensor& g, const Tensor& cond, const Shape& a_shape, const Shape& b_shape, Stream s) {
  check_defined(g, "where_backward", "grad_out");
  Tensor zero = Tensor::full({}, 0, g.dtype(), g.device(), s);
  Tensor ga = where(cond, g, zero, s), gb = where(cond, zero, g, s);
  return {sum_to_shape(ga, a_shape, s), sum_to_shape(gb, b_shape, s)};
}

Tensor masked_fill_backward(const Tensor& g, const Tensor& mask, Stream s) { return masked_fill(g, mask, 0, s); }

Tensor neg_backward(const Tensor& g, Stream s) { return neg(g, s); }
Tensor abs_backward(const Tensor& g, const Tensor& x, Stream s) { return binary(BinaryOp::kAbsBackward, g, x, 0, s); }
Tensor relu_backward(const Tensor& g, const Tensor& out, Stream s) {
  return binary(BinaryOp::kReluBackward, g, out, 0, s);
}
Tensor exp_backward(const Tensor& g, const Tensor& out, Stream s) { return mul(g, out, s); }
Tensor log_backward(const Tensor& g, const Tensor& x, Stream s) { return div(g, x, s); }
Tensor sqrt_backward(const Tensor& g, const Tensor& out, Stream s) {
  return binary(BinaryOp::kSqrtBackward, g, out, 0, s);
}
Tensor rsqrt_backward(const Tensor& g, const Tensor& out, Stream s) {
  return binary(BinaryOp::kRsqrtBackward, g, out, 0, s);
}
Tensor tanh_backward(const Tensor& g, const Tensor& out, Stream s) {
  return binary(BinaryOp::kTanhBackward, g, out, 0, s);
}
Tensor sigmoid_backward(const Tensor& g, const Tensor& out, Stream s) {
  return binary(BinaryOp::kSigmoidBackward, g, out, 0, s);
}
Tensor silu_backward(const Tensor& g, const Tensor& x, Stream s) { return binary(BinaryOp::kSiluBackward, g, x, 0, s); }
Tensor gelu_backward(const Tensor& g, const Tensor& x, GeluApprox approx, Stream s) {
  return binary(approx == GeluApprox::kTanh ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluErfBackward, g, x, 0, s);
}
Tensor pow_scalar_backward(const Tensor& g, const Tensor& x, double exponent, Stream s) {
  return binary(BinaryOp::kPowScalarBackward, g, x, exponent, s);
}

}  // namespace dt::kernels
