// Sharding propagation for DTensor ops, the pure part (no communication): an OpSchema (op name, the inputs'
// shapes, dtypes and specs, the op's parameters) goes through the op's rule to a list of single-dim strategies,
// which are expanded over the mesh dims, priced and the cheapest is chosen.
//
// Note [single-dim strategies]
// A rule states, for ONE mesh dim, which placements of the inputs give which placements of the outputs such that
// running the local op on every rank's blocks yields every rank's block of the result (PyTorch's "single-dim
// strategies"). E.g. matmul on one mesh dim: (R, R) -> R, (S(0), R) -> S(0), (R, S(1)) -> S(1),
// (S(1), S(0)) -> P(sum), (P(sum), R) -> P(sum), (R, P(sum)) -> P(sum). Since every rule acts on each mesh dim
// independently, any combination of one strategy per mesh dim is again valid on the n-d mesh, with one proviso:
// when several mesh dims shard the same tensor dim (nested sharding), every operand must nest them in the same
// order (so that corresponding dims are chunked alike). The expansion therefore also picks one mesh-dim order
// (a permutation pi; a tensor dim's splitters are sorted by their position in pi) for all operands at once.
// Some rules are only valid for some shapes (a reshape that splits a sharded dim keeps the sharding only when the
// chunks line up): they add a validate() hook that checks an expanded candidate against the layout math.
//
// Choice: each valid candidate costs the sum, over the inputs, of the planner's plan cost from the input's current
// spec to the spec the candidate requires (placement/planner.h), plus the rule's estimate of communication inside
// the op (loss parallel's all-reduces). The cheapest wins; ties go to the earlier candidate, i.e. the rule's
// preference order (its strategies are listed in preference order; mesh dim 0 varies slowest).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "placement/cost_model.h"
#include "placement/mesh_shape.h"
#include "placement/placement.h"
#include "placement/sharding_spec.h"

namespace dt::ops {

using ParamValue = std::variant<bool, int64_t, double, std::vector<int64_t>, std::string>;

// Named op parameters (dims, keepdim, eps, scalars, ...). Part of the schema, so part of the strategy cache key.
class OpParams {
 public:
  OpParams& set(std::string name, ParamValue value);
  bool has(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  std::string to_string() const;  // "dim=1, keepdim=true"
  bool operator==(const OpParams& other) const = default;
  size_t hash() const;

 private:
  const ParamValue& get(const std::string& name) const;
  std::vector<std::pair<std::string, ParamValue>> entries_;
};

// One input as the rules see it. An absent optional input (a linear without bias) has defined == false.
struct TensorMeta {
  bool defined = true;
  Shape shape;
  DType dtype = DType::f32;
  ShardingSpec spec;  // the input's current spec
  int64_t ndim() const { return int64_t(shape.size()); }
  bool operator==(const TensorMeta& other) const = default;
};

struct OutputMeta {
  Shape shape;
  DType dtype = DType::f32;
};

// A registered op's typed id: its rule's index in the registry (dispatch.h op_id), resolved from the name once per
// call by one table lookup. kUnresolved: a schema built outside dispatch (propagate resolves it).
enum class OpId : uint32_t { kUnresolved = 0xffffffffu };

struct OpSchema {
  OpSchema(std::string op, MeshShape mesh, OpId id = OpId::kUnresolved)
      : op(std::move(op)), id(id), mesh(std::move(mesh)) {}
  std::string op;  // for messages
  OpId id;
  MeshShape mesh;
  std::vector<TensorMeta> inputs;
  OpParams params;
  // The strategy cache key is the schema itself: everything the choice depends on (op id, mesh, params, inputs),
  // hashed and compared field by field, so no text is formatted per call. Both need a resolved id.
  size_t hash() const;
  bool same_key(const OpSchema& other) const;
  // "a: [4, 6] f32 S(0),R; b: [6, 8] f32 R,R" (names from the rule, else "input i").
  std::string describe_inputs(const std::vector<std::string>& names = {}) const;
};

// One mesh dim's strategy (Note [single-dim strategies]): a placement per output and per input (absent inputs
// get Replicate and are ignored).
struct DimStrategy {
  std::vector<Placement> outputs;
  std::vector<Placement> inputs;
  std::string to_string() const;  // "S(0), R -> S(0)"
};

// A strategy on the whole mesh.
struct OpStrategy {
  std::vector<ShardingSpec> outputs;
  std::vector<ShardingSpec> inputs;
  double redistribute_cost = 0;  // sum of the inputs' plan costs
  double extra_cost = 0;         // communication inside the op (rule's estimate)
  double cost() const { return redistribute_cost + extra_cost; }
  std::string to_string() const;  // "S(0),R x R,S(1) -> S(0),S(1)"
};

// Expands single-dim strategies to every combination over the mesh dims and every mesh-dim order that matters
// (all orders up to 3 mesh dims; beyond, the ascending one and those of the inputs' current specs). Candidates
// whose specs do not fit the operands' ndims are dropped; duplicates are dropped. Order: preference order.
std::vector<OpStrategy> expand_strategies(const OpSchema& schema, const std::vector<OutputMeta>& outputs,
                                          const std::vector<DimStrategy>& dim_strategies);

// The cost of moving every defined input from its current spec to the candidate's (planner costs), or nullopt
// when the planner cannot (a Shard becoming Partial, mixed Partial ops).
std::optional<double> redistribute_cost(const OpSchema& schema, const OpStrategy& candidate,
                                        const CostModel& model = CostModel{});

// Whether a spec could be produced or consumed: it does not mix Partial ops.
bool is_usable_spec(const ShardingSpec& spec);

}  // namespace dt::ops
