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

// The registry, in priority order; find() throws InternalError when no transition executes a step.
const std::vector<std::unique_ptr<Transition>>& transitions();
const Transition& find_transition(const PlanStep& step);

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

}  // namespace dt::redistribute
