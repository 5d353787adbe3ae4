#include "dtensor/factory.h"

#include <functional>

#include "core/error.h"
#include "dtensor/redistribute/transition.h"
#include "placement/layout.h"

namespace dt {
namespace {

// The one path of every factory: validate, find this rank's block of the non-Partial spec, fill it with
// `block_fn(offset, block shape)`, then apply the R -> P rule on the Partial mesh dims.
DTensor make(const char* what, const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options,
             const std::function<Tensor(const Shape& offset, const Shape& block)>& block_fn) {
  for (int64_t n : shape) DT_CHECK_ARG(n >= 0, "dt::", what, ": negative size in shape ", shape_str(shape));
  DT_CHECK_ARG(is_valid_dtype(options.dtype), "dt::", what, ": invalid dtype ", int(options.dtype));
  ShardingSpec spec = make_spec(std::move(placements), options.shard_order, int64_t(shape.size()), mesh);
  if (!mesh.is_member())
    return DTensor::from_local_unchecked(Tensor::empty({0}, options.dtype, mesh.device()), mesh, spec, shape);
  const std::vector<IndexRange> ranges = local_ranges(shape, mesh.shape(), without_partial(spec), mesh.coordinate());
  Shape offset, block;
  for (const IndexRange& r : ranges) {
    offset.push_back(r.begin);
    block.push_back(r.size());
  }
  Tensor local = redistribute::partial_local_block(block_fn(offset, block), spec, mesh.coordinate());
  return DTensor::from_local_unchecked(std::move(local), mesh, spec, shape);
}

}  // namespace

DTensor empty(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options) {
  return make("empty", shape, mesh, std::move(placements), options,
              [&](const Shape&, const Shape& block) { return Tensor::empty(block, options.dtype, mesh.device()); });
}

DTensor zeros(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options) {
  return full(shape, 0.0, mesh, std::move(placements), options);
}

DTensor ones(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options) {
  return full(shape, 1.0, mesh, std::move(placements), options);
}

DTensor full(const Shape& shape, double value, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options) {
  return make("full", shape, mesh, std::move(placements), options, [&](const Shape&, const Shape& block) {
    return Tensor::full(block, value, options.dtype, mesh.device());
  });
}

DTensor rand(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
             const FactoryOptions& options, double lo, double hi) {
  return make("rand", shape, mesh, std::move(placements), options, [&](const Shape& offset, const Shape& block) {
    return Tensor::rand_block(shape, offset, block, options.seed, options.dtype, lo, hi).to(mesh.device());
  });
}

DTensor randn(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
              const FactoryOptions& options, double mean, double std) {
  return make("randn", shape, mesh, std::move(placements), options, [&](const Shape& offset, const Shape& block) {
    return Tensor::randn_block(shape, offset, block, options.seed, options.dtype, mean, std).to(mesh.device());
  });
}

DTensor trunc_normal(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements,
                     const FactoryOptions& options, double mean, double std, double lo, double hi) {
  return make("trunc_normal", shape, mesh, std::move(placements), options,
              [&](const Shape& offset, const Shape& block) {
                return Tensor::trunc_normal_block(shape, offset, block, options.seed, options.dtype, mean, std, lo, hi)
                    .to(mesh.device());
              });
}

}  // namespace dt
