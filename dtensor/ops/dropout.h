// Dropout on DTensors with a mask that depends only on (seed, global index): keep element i when
// Tensor::rand(shape, seed, f64)[i] >= p, scale kept values by 1 / (1 - p). The mask is the same whatever the
// placements (each rank draws its block's values with Tensor::rand_block), so any Shard/Replicate layout keeps its
// placements and gives the same result. A Partial input is reduced first (dropout is not linear in it: the mask is,
// but the rule stays simple and exact). dropout_backward(grad, p, seed) applies the same mask and scale to grad.
#pragma once

#include <cstdint>

#include "dtensor/dtensor.h"

namespace dt {

// training == false returns x. p in [0, 1]; p == 1 gives zeros (as torch).
DTensor dropout(const DTensor& x, double p, uint64_t seed, bool training = true);
DTensor dropout_backward(const DTensor& grad, double p, uint64_t seed);

}  // namespace dt
