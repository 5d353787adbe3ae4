// softmax and log_softmax over one dim (numerically stable: the row maximum is subtracted before exp), and their
// backward kernels. Floating dtypes only; f16/bf16 are computed in float and rounded once. Empty dims give empty
// results. CUDA work is queued on `stream`.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor softmax(const Tensor& x, int64_t dim, Stream stream = {});
Tensor log_softmax(const Tensor& x, int64_t dim, Stream stream = {});
// grad_x = out * (grad_out - sum(grad_out * out, dim)), with out = softmax(x, dim).
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, Stream stream = {});
// grad_x = grad_out - exp(out) * sum(grad_out, dim), with out = log_softmax(x, dim).
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, Stream stream = {});

// Canonical form: contiguous [outer, n, inner] blocks, softmax along n.
namespace cpu {
void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
void softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& out, int64_t outer, int64_t n,
                      int64_t inner, bool log);
}  // namespace cpu

namespace cuda {
void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, Stream stream);
void softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& out, int64_t outer, int64_t n,
                      int64_t inner, bool log, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
