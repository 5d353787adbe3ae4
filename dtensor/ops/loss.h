// Cross-entropy with integer class targets on DTensors. logits are [..., C] (class dim LAST) and targets have the
// logits' leading shape. Per mesh dim:
//   logits R, targets R               -> R
//   logits S(d), targets S(d), d < last -> kNone: S(d); kSum, kMean: P(sum) (kMean divides by the global number of
//                                        non-ignored targets, one all-reduce of a count)
//   logits S(last), targets R         -> R   ("loss parallel": a distributed log-softmax, an all-reduce of the row
//                                        maxima and one of (sum of exp, target logit) per row; the logits are never
//                                        gathered)
// Partial logits are reduced first.
#pragma once

#include <cstdint>

#include "dtensor/dtensor.h"
#include "kernels/ops/loss.h"

namespace dt {

using kernels::LossReduction;

DTensor cross_entropy(const DTensor& logits, const DTensor& targets, int64_t ignore_index = -100,
                      LossReduction reduction = LossReduction::kMean);
// The same plus every row's log-sum-exp (the targets' shape, f32 or f64; sharded like the targets' rows, Replicate
// under loss parallel), which the backward (nn/) reuses instead of recomputing it.
struct DCrossEntropyResult {
  DTensor loss;
  DTensor lse;
};
DCrossEntropyResult cross_entropy_with_lse(const DTensor& logits, const DTensor& targets, int64_t ignore_index = -100,
                                           LossReduction reduction = LossReduction::kMean);

}  // namespace dt
