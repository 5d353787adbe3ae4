// layer_norm and rms_norm over the last k dims (k = normalized_shape.size() >= 1, which must equal x's trailing
// dims), with optional elementwise weight (and bias for layer_norm) of normalized_shape, and their backward kernels.
//
// The saved statistics have x's leading shape (x.shape[:-k]) and the compute dtype: f32 for f16/bf16/f32 inputs,
// f64 for f64. The variance is the biased one (divide by the number of normalized elements), as torch.
// Floating dtypes only; x, weight, bias and grad_out share a dtype. CUDA work is queued on `stream`.
#pragma once

#include "core/device.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace dt::kernels {

struct LayerNormResult {
  Tensor out;
  Tensor mean;
  Tensor rstd;  // 1 / sqrt(var + eps)
};
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                           const Tensor& bias = {}, double eps = 1e-5, Stream stream = {});

struct LayerNormGrads {
  Tensor grad_x;
  Tensor grad_weight;  // defined when weight is
  Tensor grad_bias;    // defined when bias is
};
// `weight` and `bias` are the forward's (bias is only looked at to decide whether grad_bias is wanted).
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight = {},
                                   const Tensor& bias = {}, Stream stream = {});

struct RmsNormResult {
  Tensor out;
  Tensor rstd;  // 1 / sqrt(mean(x^2) + eps)
};
RmsNormResult rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, double eps = 1e-6,
                       Stream stream = {});

struct RmsNormGrads {
  Tensor grad_x;
  Tensor grad_weight;  // defined when weight is
};
RmsNormGrads rms_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                               const Tensor& rstd, const Tensor& weight = {}, Stream stream = {});

// Canonical form: x contiguous [rows, cols]; weight/bias contiguous [cols] or undefined; mean/rstd [rows] in the
// compute dtype. rms_norm passes an undefined mean (and bias).
namespace cpu {
void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, int64_t rows, int64_t cols, double eps);
void norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                   int64_t cols);
}  // namespace cpu

namespace cuda {
void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, int64_t rows, int64_t cols, double eps, Stream stream);
void norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                   int64_t cols, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
