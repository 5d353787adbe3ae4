// dt::local_map, after torch.distributed.tensor.experimental.local_map: wraps a function of local Tensors into a
// function of DTensors. The inputs are brought to `in_placements` (redistributed, or an InvalidArgument when
// redistribute_inputs is false and they differ; an empty entry takes that input as it is), `fn` runs on every
// rank's local blocks, and its results are wrapped with `out_placements`. The caller asserts that fn is correct for
// these placements (no sharding propagation checks it): e.g. a row-wise op on S(0) blocks, or a local partial sum
// declared P(sum).
//
// Output global shapes are inferred exactly from the local sizes (DTensor::from_local: one small exchange per
// sharded mesh dim, uneven shards included) unless given in options.out_shapes. Ranks outside the mesh do not run fn;
// their outputs have empty locals and the given global shape, or [0].
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "dtensor/dtensor.h"

namespace dt {

using LocalFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using DTensorFn = std::function<std::vector<DTensor>(const std::vector<DTensor>&)>;

struct LocalMapOptions {
  bool redistribute_inputs = true;
  std::vector<std::optional<Shape>> out_shapes;  // per output (empty: every shape inferred)
};

DTensorFn local_map(LocalFn fn, std::vector<std::vector<Placement>> in_placements,
                    std::vector<std::vector<Placement>> out_placements, LocalMapOptions options = {});

}  // namespace dt
