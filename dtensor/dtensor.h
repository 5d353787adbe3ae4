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
  // Brought to `other`'s layout: its mesh and placements (and, on the same mesh, its shard order); this very DTensor
  // when the layouts already agree (no copy). What a gradient needs to be added to a value: autograd's leaves, FSDP's
  // accumulation, load_state_dict.
  DTensor redistribute_like(const DTensor& other) const;
  // Asynchronous: the first collective of the plan is in flight when this returns; wait() finishes the rest and
  // yields the result. Ranks must wait() on redistributions of the same mesh in the same order.
  RedistributeHandle redistribute_async(std::vector<Placement> placements, const ShardOrder& shard_order = {}) const;

  const DeviceMesh& mesh() const { return mesh_; }
  const ShardingSpec& spec() const { return spec_; }
  const std::vector<Placement>& placements() const { return spec_.placements(); }
  const Shape& shape() const { return shape_; }  // global shape
  // The global index of this rank's block's first element (zeros on ranks outside the mesh).
  Shape local_offset() const;
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return local_.dtype(); }
  Device device() const { return mesh_.device(); }
  std::string describe() const;

 private:
  // Every same-mesh redistribution: redistribute_to(spec) is redistribute_async_to(spec).wait().
  DTensor redistribute_to(ShardingSpec spec) const;
  RedistributeHandle redistribute_async_to(ShardingSpec spec) const;
  friend class RedistributeHandle;
  DTensor(Tensor local, DeviceMesh mesh, ShardingSpec spec, Shape shape)
      : local_(std::move(local)), mesh_(std::move(mesh)), spec_(std::move(spec)), shape_(std::move(shape)) {}

  Tensor local_;
  DeviceMesh mesh_;
  ShardingSpec spec_;
  Shape shape_;
};

// PyTorch's distribute_tensor(tensor, mesh, placements, src_data_rank=0): every rank gets its block of the tensor
// held by the mesh's global rank `src_data_rank`, which sends each rank only its own block (point-to-point; Partial
// dims follow the exact R -> P rule: for sum, coordinate 0 holds the value and the others zeros). Collective over the
// mesh's members (ranks outside the mesh get an empty local tensor and do not communicate). Every member passes a
// tensor of the source's shape and dtype (only the source's data is read), or calls the overload below instead.
// Shapes, dtypes and source are checked to agree on every rank (InvalidArgument naming the ranks otherwise).
// src_data_rank = std::nullopt is the explicit choice that every rank already holds the same tensor: each rank slices
// its block locally, with no communication and no check.
DTensor distribute_tensor(const Tensor& full, const DeviceMesh& mesh, std::vector<Placement> placements,
                          const ShardOrder& shard_order = {}, std::optional<int64_t> src_data_rank = 0);
// The same on a rank other than the source: it passes the global shape and dtype, no tensor.
DTensor distribute_tensor(const Shape& global_shape, DType dtype, const DeviceMesh& mesh,
                          std::vector<Placement> placements, const ShardOrder& shard_order = {},
                          int64_t src_data_rank = 0);

// The validated spec of `placements` (one per mesh dim) in `shard_order` for a tensor of `ndim` dims on `mesh`
// (InvalidArgument naming what does not fit): what every entry point taking placements builds.
ShardingSpec make_spec(std::vector<Placement> placements, const ShardOrder& shard_order, int64_t ndim,
                       const DeviceMesh& mesh);

// A handle on an asynchronous redistribution.
class RedistributeHandle {
 public:
  RedistributeHandle() = default;
  DTensor wait() &;
  DTensor wait() &&;          // on a temporary handle (x.redistribute_async(...).wait()): the result moves out
  bool is_completed() const;  // whether the in-flight collective finished (later steps may remain)

  struct State;

 private:
  friend class DTensor;
  explicit RedistributeHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void finish();  // completes the run once; the result is in state_->result
  std::shared_ptr<State> state_;
};

std::ostream& operator<<(std::ostream& os, const DTensor& t);

}  // namespace dt
