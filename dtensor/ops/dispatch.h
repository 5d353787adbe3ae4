// The one funnel every DTensor op goes through:
//
//   OpSchema (op, inputs' shapes/dtypes/specs, params)
//     -> the op's rule: output shapes/dtypes (validates the arguments) and single-dim strategies
//     -> expansion over the mesh dims, validation, pricing, choice (strategy.h; cached per schema)
//     -> redistribution of the inputs to the chosen specs
//     -> the local kernel on every rank's blocks
//     -> the outputs wrapped as DTensors with the chosen specs (their local shapes are checked against the layout)
//
// The public ops (dtensor/ops.h) are thin wrappers that fill an OpParams and call dispatch(). A backward (next
// wave: autograd) reuses the same funnel: matmul's backward is two dispatched matmuls with transposed operands,
// each picking its own strategy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops/strategy.h"
#include "placement/layout.h"

namespace dt::ops {

// What an op's local compute sees: the schema, the mesh, the chosen strategy and the outputs' global metadata.
struct OpCall {
  const OpSchema& schema;
  const DeviceMesh& mesh;
  const OpStrategy& strategy;
  const std::vector<OutputMeta>& outputs;

  const OpParams& params() const { return schema.params; }
  const ShardingSpec& input_spec(size_t i) const { return strategy.inputs.at(i); }
  const ShardingSpec& output_spec(size_t i) const { return strategy.outputs.at(i); }
  // This rank's block of input i / output i (global index ranges per dim) and the output's local shape.
  std::vector<IndexRange> input_ranges(size_t i) const;
  std::vector<IndexRange> output_ranges(size_t i) const;
  Shape output_local_shape(size_t i) const;
  // The mesh dims on which input i is Shard(dim) in the chosen strategy.
  std::vector<int64_t> mesh_dims_sharding(size_t input, int64_t dim) const;
};

struct OpRule {
  std::string name;
  std::vector<std::string> input_names;  // for messages ("a", "b"); may be shorter than the inputs
  // Validates the arguments (InvalidArgument naming the op) and returns the outputs' global shapes and dtypes.
  std::function<std::vector<OutputMeta>(const OpSchema&)> meta;
  // Single-dim strategies in preference order (Note [single-dim strategies] in strategy.h).
  std::function<std::vector<DimStrategy>(const OpSchema&, const std::vector<OutputMeta>&)> strategies;
  // Optional: whether an expanded candidate is valid for these shapes (e.g. views: the chunks must line up).
  std::function<bool(const OpSchema&, const std::vector<OutputMeta>&, const OpStrategy&)> validate;
  // Optional: the cost of communication the op itself performs under a candidate (CostModel units).
  std::function<double(const OpSchema&, const std::vector<OutputMeta>&, const OpStrategy&)> extra_cost;
  // The local computation: this rank's input blocks (undefined for absent inputs) -> its output blocks.
  std::function<std::vector<Tensor>(const OpCall&, const std::vector<Tensor>&)> compute;
};

// The rule registry (registry.cc lists every rule). Throws InternalError for an unknown op.
const OpRule& find_rule(const std::string& op);
OpId op_id(const std::string& op);  // the typed id of a registered op (InternalError for an unknown one)
const OpRule& rule_of(OpId id);
std::vector<std::string> registered_ops();
bool is_registered_op(const std::string& op);  // built in or registered by the user (no throw)
// Registers a user op's rule (e.g. a fused kernel with its own sharding strategies), callable afterwards through
// dispatch(rule.name, ...) like a built-in op. Thread-safe, at any time; the rule must stay valid for the process's
// life (it is never removed). InvalidArgument for a rule without name, meta, strategies or compute, and for a name
// already registered (built-in or user). Returns the op's id.
OpId register_op_rule(OpRule rule);

// The outcome of propagation for a schema.
struct Propagation {
  std::vector<OutputMeta> outputs;
  OpStrategy chosen;
  int64_t candidates = 0;  // valid candidates considered
  // Whether every input already has the chosen spec (no redistribution at all).
  bool direct() const { return redistributed_inputs.empty(); }
  std::vector<size_t> redistributed_inputs;
};

// Propagation without running anything (pure; cached per schema key). Throws InvalidArgument for bad arguments and
// Unsupported, naming the op, the given placements and a layout that works, when no strategy is valid.
Propagation propagate(const OpSchema& schema);
// The same, from the DTensors an op would be called with.
Propagation explain(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params = {});

// Runs an op through the funnel. Inputs may include undefined DTensors for absent optional inputs.
std::vector<DTensor> dispatch(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params = {});
DTensor dispatch_one(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params = {});

// What an op does when its inputs' placements have no direct strategy and communication is needed to reach one:
// kAllow redistributes (logged at debug level), kError throws Unsupported naming the op, the placements given and
// the placements it would have redistributed to. Local-only changes (R -> S slicing, R -> P) are always allowed.
enum class ImplicitRedistribute { kAllow, kError };
void set_implicit_redistribute(ImplicitRedistribute mode);  // this thread (one rank per thread in tests)
ImplicitRedistribute implicit_redistribute();

class ImplicitRedistributeGuard {
 public:
  explicit ImplicitRedistributeGuard(ImplicitRedistribute mode) : prev_(implicit_redistribute()) {
    set_implicit_redistribute(mode);
  }
  ~ImplicitRedistributeGuard() { set_implicit_redistribute(prev_); }
  ImplicitRedistributeGuard(const ImplicitRedistributeGuard&) = delete;
  ImplicitRedistributeGuard& operator=(const ImplicitRedistributeGuard&) = delete;

 private:
  ImplicitRedistribute prev_;
};

struct StrategyCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t size = 0;
};
StrategyCacheStats strategy_cache_stats();
void clear_strategy_cache();

}  // namespace dt::ops
