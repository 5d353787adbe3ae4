// Tensor parallelism: parallelize_module(module, tp_mesh, plan) with PyTorch's styles. A plan maps
// fully-qualified-name patterns ('*' matches one name component: "layers.*.attention.wq") to styles; each style
// sets its module's parameter layouts (applied now if the parameters exist, else at materialize) and installs
// forward hooks that bring inputs to the placements the module needs and outputs to the placements the plan asks.
//
//   ColwiseParallel    Linear: weight Shard(0), bias Shard(0); input -> Replicate; output Shard(-1)
//                      Embedding: weight Shard(1); output Shard(-1)
//   RowwiseParallel    Linear: weight Shard(1), bias Replicate; input -> Shard(-1); output Partial -> Replicate
//                      Embedding: weight Shard(0) (vocab); ids Replicate; output Partial -> Replicate
//   SequenceParallel   LayerNorm / RMSNorm on sequence shards: input -> Shard(1), output Shard(1), weights Replicate
//   PrepareModuleInput / PrepareModuleOutput: redistribute a module's inputs / outputs, nothing else.
// Inputs are DTensors, so input_layouts declare the placement an input arrives with (PyTorch uses them to wrap plain
// tensors): when given, an input that arrives otherwise is an InvalidArgument naming the module, both placements
// and the style; when nullopt (the default) any placement is taken. Either way the input is then redistributed to
// what the module computes on (Colwise: Replicate; Rowwise: Shard(-1) for Linear, Replicate for Embedding).
// output_layouts say where outputs go. Loss
// parallel: a Colwise output projection with output_layouts Shard(-1) gives class-sharded logits, and dt::cross_entropy
// on them never gathers them (dtensor/ops/loss.h). The mesh must be 1-d (the tp dim: mesh["tp"]); a pattern that names
// no module, a style on a module it does not support, or a parameter without the dim a style shards is an
// InvalidArgument naming the module.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace dt::nn {

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  virtual std::string name() const = 0;
  // Applies the style to `module` (its fully-qualified name `fqn`, for messages) on the 1-d `mesh`.
  virtual void apply(Module& module, const std::string& fqn, const DeviceMesh& mesh) const = 0;
};
using StylePtr = std::shared_ptr<const ParallelStyle>;
using ParallelPlan = std::vector<std::pair<std::string, StylePtr>>;

struct ColwiseOptions {
  std::optional<Placement> input_layouts;   // checked when given (see above); default: any
  std::optional<Placement> output_layouts;  // default Shard(-1)
};
struct RowwiseOptions {
  std::optional<Placement> input_layouts;   // checked when given (see above); default: any
  std::optional<Placement> output_layouts;  // default Replicate
};
StylePtr ColwiseParallel(ColwiseOptions options = {});
StylePtr RowwiseParallel(RowwiseOptions options = {});
StylePtr SequenceParallel(int64_t sequence_dim = 1);
// Per positional input (output): the placement it is declared to have, checked like input_layouts (nullopt:
// anything), and the one to move it to (nullopt: left as it is).
StylePtr PrepareModuleInput(std::vector<std::optional<Placement>> input_layouts,
                            std::vector<std::optional<Placement>> desired_input_layouts);
StylePtr PrepareModuleOutput(std::vector<std::optional<Placement>> output_layouts,
                             std::vector<std::optional<Placement>> desired_output_layouts);

// Applies the plan's styles in order. Every pattern must match at least one module.
void parallelize_module(const ModulePtr& module, const DeviceMesh& mesh, const ParallelPlan& plan);
// The same with one style for the module itself.
void parallelize_module(const ModulePtr& module, const DeviceMesh& mesh, const StylePtr& style);

// Whether a fully-qualified name matches a pattern ('*' matches one component, fnmatch-style within it).
bool fqn_matches(const std::string& pattern, const std::string& fqn);

}  // namespace dt::nn
