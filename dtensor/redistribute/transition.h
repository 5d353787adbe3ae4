// One redistribution transition = one small class: is_suitable() says whether it executes a planner step,
// start() issues its communication and returns a pending result, finish() produces the local tensor of the step's
// target spec. The classes are listed in priority order in registry.cc (Paddle's reshard_function_registry.cc is
// the model). Padding for uneven shards happens inside a transition and never leaves it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collectives/work.h"
#include "core/tensor.h"
#include "dtensor/device_mesh.h"
#include "kernels/strided_view.h"
#include "placement/planner.h"
#include "placement/transfer_plan.h"

namespace dt::redistribute {

struct StepContext {
  const DeviceMesh& mesh;
  const Shape& global;
  const PlanStep& step;
  const Tensor& input;  // this rank's block under step.before (contiguous)

  int64_t group_size() const { return mesh.size(step.mesh_dim); }
  int64_t my_index() const { return mesh.coordinate()[size_t(step.mesh_dim)]; }
  const CommunicatorPtr& comm() const { return mesh.comm(step.mesh_dim); }
  // Every member's size along tensor dim d before / after the step (member i: this rank's coordinate with
  // mesh_dim = i; placement/layout.h group_member_sizes). The other dims do not change within a group.
  std::vector<int64_t> member_sizes_before(int64_t d) const;
  std::vector<int64_t> member_sizes_after(int64_t d) const;
};

struct PendingStep {
  WorkPtr work;                    // null for local steps
  std::function<Tensor()> finish;  // called once, after work->wait() (it may move its result out); or empty and:
  Tensor result;                   // the step's output, complete once the work is (no closure to call)
};

class Transition {
 public:
  virtual ~Transition() = default;
  virtual const char* name() const = 0;
  virtual bool is_suitable(const PlanStep& step) const = 0;
  virtual PendingStep start(const StepContext& ctx) const = 0;
};

// Between two meshes of one world (cross_mesh.cc): the point-to-point transfers of a TransferPlan
// (placement/transfer_plan.h). Partial dims never reach it: the source mesh reduces them first and the target mesh
// produces them after (Note [cross-mesh plan]).
struct TransferContext {
  const CommunicatorPtr& world;  // sends and receives address global ranks
  const TransferPlan& plan;
  const Tensor& input;  // this rank's block under the plan's source spec (any tensor on ranks that send nothing)
  Shape out_shape;      // this rank's block under the target spec ({0} on ranks outside the target)
  DType dtype;
  Device device;
};

class CrossMeshTransition {
 public:
  const char* name() const { return "cross-mesh point-to-point"; }
  // Whether it can move between these meshes (same world, same device type); `why` says why not.
  bool is_suitable(const DeviceMesh& src, const DeviceMesh& dst, std::string* why) const;
  // Posts every receive and send of this rank (local copies happen here); the result is this rank's target block.
  PendingStep start(const TransferContext& ctx) const;
};

// The registry, in priority order; find() throws InternalError when no transition executes a step.
const std::vector<std::unique_ptr<Transition>>& transitions();
const Transition& find_transition(const PlanStep& step);
// The transition between meshes (registered beside the 1-d ones in registry.cc).
const CrossMeshTransition& cross_mesh_transition();

// Helpers shared by the transitions.
// Moves tensor dim `d` to the front (a view).
Tensor dim_to_front(const Tensor& t, int64_t d);
// The inverse permutation of dim_to_front applied to a tensor whose dim 0 is the old dim d.
Tensor front_to_dim(const Tensor& t, int64_t d);
// Whether dims before `d` all have size 1, so that a contiguous tensor with `d` moved to the front has the same
// memory order (no pack needed).
bool leading_dims_trivial(const Shape& shape, int64_t d);
// t's consecutive slices along `dim` of the given sizes (which sum to t.size(dim)), as strided views: what the views
// collectives take, without a Tensor per slice (this runs on every redistribution).
std::vector<kernels::StridedView> slice_views(const Tensor& t, int64_t dim, const std::vector<int64_t>& sizes);
// R -> P(op), exact (never a division): the local value of the member at `index` along the mesh dim, given the
// replicated `value`. sum: index 0 keeps the value, the others hold zeros; product: the others hold ones; avg, max,
// min: every index keeps the value (shared, not copied). The one place this rule is written: distribute_tensor and
// cross-mesh redistribution reach it through partial_local_block.
Tensor partial_local_value(const Tensor& value, ReduceOp op, int64_t index);
// This rank's block of `spec` from its block of without_partial(spec), at mesh coordinate `coord`: the rule above
// on every Partial mesh dim (also for specs mixing Partial ops, which are legal to hold, though not to plan through).
Tensor partial_local_block(Tensor plain_block, const ShardingSpec& spec, const std::vector<int64_t>& coord);

}  // namespace dt::redistribute
