// DTensor: a local tensor plus its spec (mesh, placements, shard order, global shape, dtype).
//
//   auto x = dt::distribute_tensor(full, mesh, {dt::Shard(0), dt::Replicate()});
//   auto y = x.redistribute({dt::Replicate(), dt::Shard(1)});
//   dt::Tensor local = y.to_local();
//   dt::Tensor whole = y.full_tensor();
//   auto z = dt::DTensor::from_local(local, mesh, {dt::Replicate(), dt::Shard(1)}, /*global shape*/ {8, 6});
//
// Every rank's local tensor is exactly the block that the layout math (placement/layout.h) assigns to its
// coordinate: uneven shards follow torch.chunk, and no padding is ever visible. Ranks outside the mesh hold an empty
// local tensor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dtensor/device_mesh.h"
#include "placement/placement.h"
#include "placement/sharding_spec.h"

namespace dt {

class RedistributeHandle;

struct FromLocalOptions {
  // The shard order for nested sharding (default: ascending mesh dims).
  ShardOrder shard_order;
  // Exchange every rank's local shape and check it against the layout (an error names the ranks that disagree).
  // Without it only this rank's shape is checked (when the global shape is given) or inferred (when not).
  bool run_check = false;
};

class DTensor {
 public:
  DTensor() = default;

  // Wraps this rank's block. Without `global_shape` it is inferred exactly (uneven shards included) by exchanging
  // the local sizes along every sharded mesh dim. The local tensor is used as is (no copy) when contiguous.
  static DTensor from_local(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                            std::optional<Shape> global_shape = std::nullopt, const FromLocalOptions& options = {});
  // No checks, no communication: the caller guarantees that `local` is the block of `spec` (used inside dtensor/).
  static DTensor from_local_unchecked(Tensor local, DeviceMesh mesh, ShardingSpec spec, Shape global_shape);

  bool defined() const { return mesh_.defined(); }
  const Tensor& to_local() const { return local_; }
  // The whole tensor on every rank of the mesh (a redistribution to all-Replicate).
  Tensor full_tensor() const;

  DTensor redistribute(std::vector<Placement> placements, const ShardOrder& shard_order = {}) const;
  DTensor redistribute(const ShardingSpec& spec) const;
  // Cross-mesh: to another mesh of the same world (different or overlapping ranks), by point-to-point transfers of
  // exactly the overlapping index ranges. Collective over the union of both meshes' ranks.
  DTensor redistribute(const DeviceMesh& mesh, std::vector<Placement> placements,
                       const ShardOrder& shard_order = {}) const;
  // Asynchronous: the first collective of the plan is in flight when this returns; wait() finishes the rest and
  // yields the result. Ranks must wait() on redistributions of the same mesh in the same order.
  RedistributeHandle redistribute_async(std::vector<Placement> placements, const ShardOrder& shard_order = {}) const;

  const DeviceMesh& mesh() const { return mesh_; }
  const ShardingSpec& spec() const { return spec_; }
  const std::vector<Placement>& placements() const { return spec_.placements(); }
  const Shape& shape() const { return shape_; }  // global shape
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return local_.dtype(); }
  Device device() const { return mesh_.device(); }
  std::string describe() const;

 private:
  DTensor redistribute_to(ShardingSpec spec) const;  // both redistribute(spec) forms: the spec moves into the result
  DTensor(Tensor local, DeviceMesh mesh, ShardingSpec spec, Shape shape)
      : local_(std::move(local)), mesh_(std::move(mesh)), spec_(std::move(spec)), shape_(std::move(shape)) {}

  Tensor local_;
  DeviceMesh mesh_;
  ShardingSpec spec_;
  Shape shape_;
};

// Splits `full` into this rank's block of the spec. With src_rank < 0 every rank already holds the same full
// tensor and the split is local (no communication); otherwise `full` is only read on the mesh's global rank
// `src_rank` and sent from there (other ranks pass a tensor of the right shape and dtype, or an undefined tensor
// together with `shape` and `dtype` given through a defined placeholder of that shape).
DTensor distribute_tensor(const Tensor& full, const DeviceMesh& mesh, std::vector<Placement> placements,
                          const ShardOrder& shard_order = {}, int64_t src_rank = -1);

// A handle on an asynchronous redistribution.
class RedistributeHandle {
 public:
  RedistributeHandle() = default;
  DTensor wait();
  bool is_completed() const;  // whether the in-flight collective finished (later steps may remain)

  struct State;

 private:
  friend class DTensor;
  explicit RedistributeHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

std::ostream& operator<<(std::ostream& os, const DTensor& t);

}  // namespace dt
