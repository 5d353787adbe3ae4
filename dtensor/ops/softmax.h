// softmax / log_softmax over one dim: the normalized dim must be whole (a sharded one is all-gathered first),
// every other dim keeps its sharding. Partial inputs are reduced first (softmax is not linear).
#pragma once

#include <cstdint>

#include "dtensor/dtensor.h"

namespace dt {

DTensor softmax(const DTensor& x, int64_t dim);
DTensor log_softmax(const DTensor& x, int64_t dim);

}  // namespace dt
