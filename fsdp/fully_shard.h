// fully_shard: PyTorch FSDP2 for nn modules. Each call makes one parameter group of the module's parameters (those
// not already in a group of a submodule that was sharded before it) and wires the group's lifecycle
// (fsdp/param_group.h) into the module's hooks:
//
//   for (auto& block : model->layers) dt::fsdp::fully_shard(block, mesh["dp"]);
//   dt::fsdp::fully_shard(model, mesh["dp"]);        // the root last: it owns the rest (embeddings, head)
//   nn::AdamW opt(model->parameters());              // built after sharding: its state is sized from the shards
//   for (...) { auto loss = ...(*model)(x)...; loss.backward(); opt.step(); opt.zero_grad(); }
//
// Every parameter becomes a DTensor sharded on dim 0 over the FSDP mesh's shard dim (on top of tensor parallelism
// when parallelize_module ran first: the spec is on the mesh both come from, with the nested shard order when TP
// already shards dim 0). The Variables keep their identity: between steps each holds its shard; in the group's
// forward and backward it holds the gathered value. After backward each parameter's grad() is the reduced
// gradient's shard, with the parameter's placements, and its post-accumulate-grad hooks run once, then.
//
// Per step and group: before forward, one all-gather (the next group's is prefetched); after forward, the gathered
// memory is freed (reshard_after_forward); before backward, gathered again (the group before it is prefetched);
// when every gradient of the group is in, one reduce-scatter (and, for HSDP, one all-reduce), overlapping the
// backward of the groups before it; at the end of backward, the pending reductions are waited for and everything
// is resharded. Collective over the FSDP mesh: every rank shards the same modules in the same order.
#pragma once

#include <memory>
#include <vector>

#include "dtensor/device_mesh.h"
#include "fsdp/options.h"
#include "fsdp/param_group.h"
#include "nn/module.h"

namespace dt::fsdp {

class FsdpState;

// The handle fully_shard returns (PyTorch's FSDPModule methods). It lives as long as the module.
class FsdpModule {
 public:
  explicit FsdpModule(std::shared_ptr<FsdpState> state) : state_(std::move(state)) {}
  // Gathers the group's parameters now (async: returns with the all-gather in flight; the module's forward waits).
  void unshard(bool async = false);
  void reshard();
  // false: backward accumulates unsharded gradients without reducing them (gradient accumulation over
  // micro-batches); the backward after it is set back to true reduces the sum once. Applies to every FSDP module
  // in this one's subtree when recurse.
  void set_requires_gradient_sync(bool on, bool recurse = true);
  // Whether backward frees the gathered parameters (default true; false keeps them for the next forward).
  void set_reshard_after_backward(bool on, bool recurse = true);
  // Explicit prefetch: the groups whose all-gather starts when this module's forward (backward) starts, replacing
  // the implicit next-in-order prefetch.
  void set_modules_to_forward_prefetch(const std::vector<nn::ModulePtr>& modules);
  void set_modules_to_backward_prefetch(const std::vector<nn::ModulePtr>& modules);
  ParamGroup& param_group();
  const std::shared_ptr<FsdpState>& state() const { return state_; }

 private:
  std::shared_ptr<FsdpState> state_;
};

// Shards `module`'s parameters over `mesh` (options.mesh_dims select its dims). Parameters must be materialized.
// Throws InvalidArgument when the module (or a parameter) is already sharded, when a mesh dim is missing, or when a
// parameter's mesh and the FSDP mesh do not come from one mesh.
FsdpModule fully_shard(const nn::ModulePtr& module, const DeviceMesh& mesh, const FsdpOptions& options = {});

// The handle of a module sharded by fully_shard, or nullptr.
std::shared_ptr<FsdpState> fsdp_state_of(const nn::Module& module);

}  // namespace dt::fsdp
