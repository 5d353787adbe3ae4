// Embedding lookup and its backward (scatter-add of the output gradient into a [V, D] gradient).
//
// weight is [V, D] (any dtype); ids have any shape and an integer dtype (i8, i32, i64, u8); the result is
// [*ids.shape, D] with weight's dtype. An id outside [0, V) is an InvalidArgument naming the id (on CUDA this
// check synchronises `stream` once per call). The backward accumulates in float for f16/bf16 (double for f64) and
// rounds once; rows of `padding_idx` get no gradient. CUDA work is queued on `stream`; on CUDA the order of the
// accumulation (atomics) is not deterministic.
#pragma once

#include <cstdint>
#include <optional>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor embedding(const Tensor& weight, const Tensor& ids, Stream stream = {});
Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings,
                          std::optional<int64_t> padding_idx = std::nullopt, Stream stream = {});

// Canonical form: weight contiguous [V, D], ids contiguous [n], out contiguous [n, D]; grad_weight [V, D] in the
// accumulation dtype (f32 or f64), zeroed by the caller. The ids were range-checked by the caller.
namespace cpu {
void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids, int64_t n, int64_t dim);
void embedding_backward(const Tensor& grad_weight_acc, const Tensor& grad_out, const Tensor& ids, int64_t n,
                        int64_t dim, int64_t padding_idx);
}  // namespace cpu

namespace cuda {
void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids, int64_t n, int64_t dim, Stream stream);
void embedding_backward(const Tensor& grad_weight_acc, const Tensor& grad_out, const Tensor& ids, int64_t n,
                        int64_t dim, int64_t padding_idx, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
