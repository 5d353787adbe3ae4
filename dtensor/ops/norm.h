// layer_norm and rms_norm over the trailing dims given by normalized_shape: those dims must be whole (sharded ones
// are all-gathered first), the leading dims keep their sharding; weight and bias are replicated. The *_with_stats
// forms also return the saved statistics (leading shape, compute dtype) that a backward needs, sharded like the
// leading dims.
#pragma once

#include "core/shape.h"
#include "dtensor/dtensor.h"

namespace dt {

DTensor layer_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight = DTensor(),
                   const DTensor& bias = DTensor(), double eps = 1e-5);
DTensor rms_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight = DTensor(), double eps = 1e-6);

struct DLayerNormResult {
  DTensor out;
  DTensor mean;
  DTensor rstd;
};
DLayerNormResult layer_norm_with_stats(const DTensor& x, const Shape& normalized_shape,
                                       const DTensor& weight = DTensor(), const DTensor& bias = DTensor(),
                                       double eps = 1e-5);
struct DRmsNormResult {
  DTensor out;
  DTensor rstd;
};
DRmsNormResult rms_norm_with_stats(const DTensor& x, const Shape& normalized_shape, const DTensor& weight = DTensor(),
                                   double eps = 1e-6);

}  // namespace dt
