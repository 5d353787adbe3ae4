// Reductions on DTensors (torch semantics, see kernels/ops/reduction.h for dtypes and empty-dim rules).
//
// A reduced dim that is sharded gives Partial without communication: sum and mean -> P(sum), amax/max(x) ->
// P(max), amin/min(x) -> P(min). mean over a sharded dim is computed as a local sum divided by the GLOBAL count of
// reduced elements, so it stays exact for uneven shards (unlike averaging per-shard means). Dims that are not
// reduced keep their sharding (renumbered when keepdim is false). Partial inputs pass through where the reduction
// is linear (sum/mean of P(sum) or P(avg)) or of the same kind (amax of P(max), amin of P(min)).
// max/min with a dim (values and indices) and argmax/argmin need the reduced dim replicated: a sharded reduced dim
// is all-gathered first; the other dims keep their sharding. argmax/argmin over all dims need every dim replicated.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/dtensor.h"

namespace dt {

// `dims` empty: every dim.
DTensor sum(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
DTensor mean(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
DTensor amax(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
DTensor amin(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// torch.max(x) / torch.min(x): 0-d.
DTensor max(const DTensor& x);
DTensor min(const DTensor& x);

struct DValuesIndices {
  DTensor values;
  DTensor indices;  // i64
};
// torch.max(x, dim, keepdim) / torch.min(x, dim, keepdim).
DValuesIndices max(const DTensor& x, int64_t dim, bool keepdim = false);
DValuesIndices min(const DTensor& x, int64_t dim, bool keepdim = false);
// Without a dim: the index into the flattened tensor.
DTensor argmax(const DTensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
DTensor argmin(const DTensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

}  // namespace dt
