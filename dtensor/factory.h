// DTensor factories, after torch.distributed.tensor.{empty, zeros, ones, full, rand, randn}(size, device_mesh=,
// placements=): every rank allocates and fills only its own block (no communication, ranks outside the mesh get
// an empty local tensor). A Partial mesh dim follows the exact R -> P rule (partial_local_value): for P(sum) only
// coordinate 0 holds the value and the others zeros, for P(product) ones, for avg/max/min every coordinate holds it;
// the DTensor's value is always the requested tensor.
//
// rand/randn are the same tensors as Tensor::rand/randn(shape, seed): element i of the global row-major order
// depends only on (seed, i), so the result does not depend on the mesh or the placements (a rank fills its block with
// Tensor::rand_block).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "dtensor/dtensor.h"

namespace dt {

struct FactoryOptions {
  DType dtype = DType::f32;
  uint64_t seed = 0;       // rand / randn
  ShardOrder shard_order;  // nested sharding (default: ascending mesh dims)
};

DTensor empty(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options = {});
DTensor zeros(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options = {});
DTensor ones(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options = {});
DTensor full(const Shape& shape, double value, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options = {});
// Uniform in [lo, hi) (integer dtypes: the integers in [lo, hi)).
DTensor rand(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options = {}, double lo = 0, double hi = 1);
// Normal(mean, std).
DTensor randn(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options = {}, double mean = 0, double std = 1);
// Normal(mean, std) truncated to [lo, hi] (torch.nn.init.trunc_normal_; Tensor::trunc_normal_block).
DTensor trunc_normal(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
                     const FactoryOptions& options, double mean, double std, double lo, double hi);

}  // namespace dt
