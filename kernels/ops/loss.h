// Cross-entropy with integer class targets: a fused log-softmax + negative log-likelihood, and its backward.
//
// logits are [..., C] (the class dim is the LAST one; for torch's [N, C, d1, ...] layout, move dim 1 to the end
// first) with a floating dtype; targets have logits' leading shape and an integer dtype. Rows whose target equals
// ignore_index contribute nothing. Reductions: kMean divides by the number of non-ignored rows (NaN when there are
// none, as torch), kSum adds, kNone returns per-row losses (0 for ignored rows) with the targets' shape. A target
// outside [0, C) other than ignore_index is an InvalidArgument (on CUDA this check synchronises `stream`).
// The loss has logits' dtype; accumulation is in float (double for f64) per row and in double across rows.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

enum class LossReduction : uint8_t { kNone, kMean, kSum };

struct CrossEntropyResult {
  Tensor loss;  // 0-d for kMean/kSum, the targets' shape for kNone
  Tensor lse;   // log-sum-exp of every row (compute dtype, targets' shape), saved for the backward
};
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                                 LossReduction reduction = LossReduction::kMean, Stream stream = {});
// grad_loss: 0-d for kMean/kSum, the targets' shape for kNone. `lse` from the forward (undefined: recomputed).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index = -100, LossReduction reduction = LossReduction::kMean,
                              Stream stream = {});

// Canonical form: logits contiguous [rows, classes], targets contiguous [rows] (integer), lse [rows] and row_loss
// [rows] in the compute dtype. Targets were validated by the caller.
namespace cpu {
void cross_entropy_rows(const Tensor& row_loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                        int64_t rows, int64_t classes, int64_t ignore_index);
// grad_logits[r, c] = scale[r] * (softmax[r, c] - (c == t[r])), scale[r] = 0 for ignored rows.
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& row_scale, int64_t rows, int64_t classes, int64_t ignore_index);
}  // namespace cpu

namespace cuda {
void cross_entropy_rows(const Tensor& row_loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                        int64_t rows, int64_t classes, int64_t ignore_index, Stream stream);
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& row_scale, int64_t rows, int64_t classes, int64_t ignore_index,
                            Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
