#include "kernels/ops/norm.h"

#include <limits>

#include "core/allocator.h"
#include "kernels/fill.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

struct NormDims {
  Shape lead;  // x.shape[:-k]
  int64_t rows = 0, cols = 0;
};

NormDims check_norm_input(const char* op, const Tensor& x, const Shape& normalized_shape) {
  check_defined(x, op, "x");
  check_floating(op, x, "x");
  size_t k = normalized_shape.size();
  DT_CHECK_ARG(k >= 1 && k <= size_t(x.dim()), op, ": normalized_shape ", shape_str(normalized_shape),
               " must have between 1 and x.dim() = ", x.dim(), " dims");
  Shape tail(x.shape().end() - int64_t(k), x.shape().end());
  DT_CHECK_ARG(tail == normalized_shape, op, ": normalized_shape ", shape_str(normalized_shape),
               " does not match the trailing dims of x's shape ", shape_str(x.shape()));
  NormDims d;
  d.lead = Shape(x.shape().begin(), x.shape().end() - int64_t(k));
  d.rows = shape_numel(d.lead);
  d.cols = shape_numel(normalized_shape);
  return d;
}

void check_affine(const char* op, const Tensor& p, const char* name, const Tensor& x, const Shape& normalized_shape) {
  if (!p.defined()) return;
  check_same_dtype(op, p, name, x, "x");
  DT_CHECK_ARG(p.shape() == normalized_shape, op, ": ", name, " has shape ", shape_str(p.shape()),
               ", expected normalized_shape ", shape_str(normalized_shape));
}

void check_stat(const char* op, const Tensor& s, const char* name, const Tensor& x, const Shape& lead) {
  check_defined(s, op, name);
  DT_CHECK_ARG(s.dtype() == acc_dtype(x.dtype()), op, ": ", name, " must have dtype ", dtype_name(acc_dtype(x.dtype())),
               " (as returned by the forward), got ", dtype_name(s.dtype()));
  DT_CHECK_ARG(s.shape() == lead, op, ": ", name, " has shape ", shape_str(s.shape()), ", expected ", shape_str(lead),
               " (x's leading dims)");
}

Tensor maybe_contiguous(const Tensor& t, Stream stream) { return t.defined() ? t.contiguous(stream) : Tensor(); }

// Both norms: mean is undefined for rms_norm.
void run_forward(const char* op, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                 const Tensor& weight, const Tensor& bias, const NormDims& d, double eps, Stream stream) {
  if (d.rows == 0) return;
  if (d.cols == 0) {  // statistics of nothing
    double nan = std::numeric_limits<double>::quiet_NaN();
    if (mean.defined()) fill(mean, nan, stream);
    fill(rstd, nan, stream);
    return;
  }
  Tensor xc = x.contiguous(stream), wc = maybe_contiguous(weight, stream), bc = maybe_contiguous(bias, stream);
  DT_OPS_DISPATCH(x.device(), op, cpu::norm_forward(out, mean, rstd, xc, wc, bc, d.rows, d.cols, eps),
                  cuda::norm_forward(out, mean, rstd, xc, wc, bc, d.rows, d.cols, eps, stream));
}

void run_backward(const char* op, const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& g,
                  const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const NormDims& d,
                  Stream stream) {
  if (d.rows == 0 || d.cols == 0) {
    if (gw.defined() && gw.numel() > 0) fill(gw, 0, stream);
    if (gb.defined() && gb.numel() > 0) fill(gb, 0, stream);
    return;
  }
  Tensor gc = g.contiguous(stream), xc = x.contiguous(stream), mc = maybe_contiguous(mean, stream),
         rc = rstd.contiguous(stream), wc = maybe_contiguous(weight, stream);
  DT_OPS_DISPATCH(x.device(), op, cpu::norm_backward(gx, gw, gb, gc, xc, mc, rc, wc, d.rows, d.cols),
                  cuda::norm_backward(gx, gw, gb, gc, xc, mc, rc, wc, d.rows, d.cols, stream));
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  const char* op = "layer_norm";
  NormDims d = check_norm_input(op, x, normalized_shape);
  common_device(op, {&x, &weight, &bias}, {"x", "weight", "bias"});
  check_affine(op, weight, "weight", x, normalized_shape);
  check_affine(op, bias, "bias", x, normalized_shape);
  DT_CHECK_ARG(eps >= 0, op, ": eps must be non-negative, got ", eps);
  Device dev = x.device();
  LayerNormResult r;
  r.out = Tensor::empty(x.shape(), x.dtype(), dev);
  r.mean = Tensor::empty(d.lead, acc_dtype(x.dtype()), dev);
  r.rstd = Tensor::empty(d.lead, acc_dtype(x.dtype()), dev);
  run_forward(op, r.out, r.mean, r.rstd, x, weight, bias, d, eps, stream);
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight, const Tensor& bias,
                                   Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  const char* op = "layer_norm_backward";
  NormDims d = check_norm_input(op, x, normalized_shape);
  check_defined(grad_out, op, "grad_out");
  Device dev = common_device(op, {&grad_out, &x, &mean, &rstd, &weight, &bias},
                             {"grad_out", "x", "mean", "rstd", "weight", "bias"});
  check_same_dtype(op, grad_out, "grad_out", x, "x");
  DT_CHECK_ARG(grad_out.shape() == x.shape(), op, ": grad_out has shape ", shape_str(grad_out.shape()),
               ", expected x's shape ", shape_str(x.shape()));
  check_stat(op, mean, "mean", x, d.lead);
  check_stat(op, rstd, "rstd", x, d.lead);
  check_affine(op, weight, "weight", x, normalized_shape);
  check_affine(op, bias, "bias", x, normalized_shape);
  LayerNormGrads r;
  r.grad_x = Tensor::empty(x.shape(), x.dtype(), dev);
  if (weight.defined()) r.grad_weight = Tensor::empty(normalized_shape, x.dtype(), dev);
  if (bias.defined()) r.grad_bias = Tensor::empty(normalized_shape, x.dtype(), dev);
  run_backward(op, r.grad_x, r.grad_weight, r.grad_bias, grad_out, x, mean, rstd, weight, d, stream);
  return r;
}

RmsNormResult rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps,
                       Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  const char* op = "rms_norm";
  NormDims d = check_norm_input(op, x, normalized_shape);
  common_device(op, {&x, &weight}, {"x", "weight"});
  check_affine(op, weight, "weight", x, normalized_shape);
  DT_CHECK_ARG(eps >= 0, op, ": eps must be non-negative, got ", eps);
  Device dev = x.device();
  RmsNormResult r;
  r.out = Tensor::empty(x.shape(), x.dtype(), dev);
  r.rstd = Tensor::empty(d.lead, acc_dtype(x.dtype()), dev);
  run_forward(op, r.out, Tensor(), r.rstd, x, weight, Tensor(), d, eps, stream);
  return r;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                               const Tensor& rstd, const Tensor& weight, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  const char* op = "rms_norm_backward";
  NormDims d = check_norm_input(op, x, normalized_shape);
  check_defined(grad_out, op, "grad_out");
  Device dev = common_device(op, {&grad_out, &x, &rstd, &weight}, {"grad_out", "x", "rstd", "weight"});
  check_same_dtype(op, grad_out, "grad_out", x, "x");
  DT_CHECK_ARG(grad_out.shape() == x.shape(), op, ": grad_out has shape ", shape_str(grad_out.shape()),
               ", expected x's shape ", shape_str(x.shape()));
  check_stat(op, rstd, "rstd", x, d.lead);
  check_affine(op, weight, "weight", x, normalized_shape);
  RmsNormGrads r;
  r.grad_x = Tensor::empty(x.shape(), x.dtype(), dev);
  if (weight.defined()) r.grad_weight = Tensor::empty(normalized_shape, x.dtype(), dev);
  run_backward(op, r.grad_x, r.grad_weight, Tensor(), grad_out, x, Tensor(), rstd, weight, d, stream);
  return r;
}

}  // namespace dt::kernels
