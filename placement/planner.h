// The redistribution planner (pure): from a source ShardingSpec to a target one as a list of 1-d steps, each on one
// mesh dim, chosen by uniform-cost search (Dijkstra) over specs under the CostModel, so the plan is the cheapest one
// made of these steps.
//
// Note [step semantics]
// A step on mesh dim m acts independently on every 1-d group along m (the ranks that differ only in coordinate m);
// the executor in dtensor/ follows these exactly. "Innermost" refers to Note [shard order] in sharding_spec.h.
//   all_gather      S(d) -> R      m must be the innermost splitter of d; the group concatenates its chunks in
//                                  coordinate order (the unpadded chunks of the parent range, see layout.h).
//   all_reduce      P(op) -> R     every member gets the op-reduction of the members' values.
//   reduce_scatter  P(op) -> S(d)  reduce, then member i keeps chunk i of d's current range; m becomes the innermost
//                                  splitter of d.
//   local_slice     R -> S(d)      member i keeps chunk i of its block along d; m becomes the innermost splitter.
//   all_to_all      S(i) -> S(j)   m must be innermost on i and becomes innermost on j: member i sends to member k
//                                  (its block of i) x (chunk k of its range of j); the result concatenates along i.
//   local_partial   R -> P(op)     exact, never a division: sum: coordinate 0 keeps the value, the others hold zeros;
//                                  product: the others hold ones; avg, max, min: every coordinate keeps the value.
// Unsupported (dt::Unsupported naming source and target): a mesh dim going from Shard to Partial, and specs that mix
// different Partial ops on different mesh dims (reductions with different ops do not commute); no plan ever passes
// through such a mixed state. P(op1) -> P(op2) on one mesh dim goes through R.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "placement/cost_model.h"
#include "placement/mesh_shape.h"
#include "placement/placement.h"
#include "placement/sharding_spec.h"

namespace dt {

struct PlanStep {
  int64_t mesh_dim = 0;
  StepKind kind = StepKind::kAllGather;
  Placement from;
  Placement to;
  int64_t from_tensor_dim = -1;  // tensor dim sharded by mesh_dim before the step (Shard `from`), else -1
  int64_t to_tensor_dim = -1;    // tensor dim sharded by mesh_dim after the step (Shard `to`), else -1
  int64_t group_size = 1;        // mesh size along mesh_dim
  int64_t bytes_moved = 0;       // sent per rank, by the largest rank (padded as the collective sends it)
  int64_t bytes_copied = 0;      // written by a local step on the largest rank
  double cost = 0;
  ShardingSpec before;            // the whole spec before the step
  ShardingSpec after;             // and after it
  std::string to_string() const;  // "mesh dim 1: all_gather S(0) -> R, 48 B/rank"
  std::string to_json() const;    // {"mesh_dim":1,"kind":"all_gather",...}
};

struct Plan {
  ShardingSpec src;
  ShardingSpec dst;
  std::vector<PlanStep> steps;
  double cost = 0;                // sum of the steps' costs
  int64_t bytes_moved() const;    // sum over steps
  std::string to_string() const;  // multi-line
  std::string to_json() const;    // {"from":...,"to":...,"cost":...,"steps":[...]}
};

// One step: mesh_dim of `before` goes to placement `to`. Checks the transition is a single step of Note [step
// semantics] (throws Unsupported otherwise, e.g. a Shard that is not innermost, S -> P, P(op1) -> P(op2), or a step
// that creates mixed Partial ops) and prices it. The executor and the tests may use it to build steps by hand.
PlanStep make_step(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& before,
                   int64_t mesh_dim, const Placement& to, const CostModel& model = CostModel{});

// The cheapest plan. Validates its inputs (InvalidArgument: spec length vs mesh, Shard dims vs the tensor, element
// size) and throws Unsupported for the transitions above, naming source and target.
Plan plan_redistribution_uncached(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                                  const ShardingSpec& dst, const CostModel& model = CostModel{});

// The same through a process-wide thread-safe cache keyed by (mesh sizes, global shape, element size, source,
// target, cost model). The reference stays valid until clear_plan_cache().
const Plan& plan_redistribution(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                                const ShardingSpec& dst, const CostModel& model = CostModel{});

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t size = 0;
};
PlanCacheStats plan_cache_stats();
// Drops every cached plan (and resets the stats). Only safe when no thread holds a reference from
// plan_redistribution (tests, or between runs).
void clear_plan_cache();

}  // namespace dt
