// visualize_sharding: a text table of which ranks hold which block of a 1-d or 2-d DTensor (what PyTorch's and
// JAX's visualize_sharding print). Computed from the layout math alone: no communication.
//
//   Sharding of [7, 5] (S(0), R) on mesh[2, 3](dp, tp):
//              cols 0:5
//   rows 0:4   r0 r1 r2
//   rows 4:7   r3 r4 r5
#pragma once

#include <string>

#include "dtensor/dtensor.h"

namespace dt {

std::string visualize_sharding(const DTensor& tensor);
// The same from a bare spec (used by tools and tests).
std::string visualize_sharding(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec);

}  // namespace dt
