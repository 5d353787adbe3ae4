// ParamGroup: the FSDP engine (PyTorch's FSDPParamGroup). It knows parameters and groups, not modules: fully_shard
// (fsdp/fully_shard.h) drives it from module and autograd hooks, a host framework from its own.
//
// A group owns its parameters' shards (the only persistent copy: a DTensor per parameter, sharded on dim 0 over
// the shard dim of the FSDP mesh), and while gathered one unsharded storage per parameter (a stable Storage that is
// released and re-filled, so saved activations and user references stay valid). One step, in order:
//
//   unshard(async)      copy-in: each shard (cast to param_dtype) into this rank's slot of one flat buffer; one
//                       all-gather of the group, as bytes
//   wait_for_unshard()  copy-out: each parameter's rows from every rank's slot into its unsharded storage
//                       (a communicator with segmented blocks gathers straight from the shards into the storages
//                       instead: Note [Gathering into the parameters] in fsdp/segmented_path.cc; on one host, shards
//                       of whole pages are not gathered at all: Note [Gathering by mapping] in fsdp/mapped_path.cc)
//   reshard()           frees the unsharded storages (or keeps the post-forward share, reshard_after_forward = k)
//   unshard / wait      again before backward
//   accumulate_grad(i)  each parameter's unsharded gradient as it is complete
//   reduce_grads()      copy-in with a cast to reduce_dtype into one flat buffer; one reduce-scatter (HSDP: then one
//                       all-reduce over the replicate dim); the gradient shards are views of its output (segmented
//                       blocks: the reduce-scatter reads the gradients where they lie, no copy-in)
//   reshard()
//
// Note [Padding stays in the flat buffers]
// Dim 0 of n rows over k ranks follows torch.chunk: chunk c = ceil(n / k), rank r holds rows [r*c, min((r+1)*c, n)),
// possibly none. Each rank's slot of the flat buffers gives every parameter c rows, so the all-gather and
// reduce-scatter see equal blocks; copy-in writes only the real rows and copy-out reads only them. No parameter,
// gradient, optimizer state or checkpoint ever sees a padding row.
//
// Collectives go through the FSDP mesh's communicators in the order of these calls, which every rank makes in the
// same order; a failed collective (a dead peer) is rethrown by the wait that needed it, on every rank. The group
// keeps that order, the state machine and the streams' ordering; each parameter's state and transitions are a
// Param (fsdp/param.h); the bytes move by a data path chosen from a table (fsdp/data_path.h). An observer attached
// with set_comm_observer (fsdp/comm_observer.h) hears of every collective.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/comm_observer.h"
#include "fsdp/options.h"

namespace dt::fsdp {

class ParamGroup {
 public:
  enum class State { kSharded, kUnsharding, kUnsharded, kPostForward };

  // `params`: the parameters' current values (whole, or sharded by TP on a mesh that, like `mesh`, is a sub-mesh
  // of one mesh), replicated over the FSDP dims; `names` for messages. `mesh` is 1-d (FSDP) or 2-d (HSDP:
  // replicate, shard). The shards are made here (a local slice, no communication).
  ParamGroup(std::string name, std::vector<std::string> names, const std::vector<DTensor>& params,
             const DeviceMesh& mesh, const FsdpOptions& options);
  ~ParamGroup();
  ParamGroup(const ParamGroup&) = delete;
  ParamGroup& operator=(const ParamGroup&) = delete;

  const std::string& name() const { return name_; }
  size_t size() const;
  const std::string& param_name(size_t i) const;
  // The persistent shard of parameter i (what the optimizer updates in place).
  const DTensor& sharded_param(size_t i) const;
  // The gathered value of parameter i (param_dtype; the original mesh and placements). Its storage is the same
  // object across steps; it may be read between wait_for_unshard() and reshard().
  const DTensor& unsharded_param(size_t i) const;
  // Whether parameter i's unsharded value maps every rank's shard instead of holding a gathered copy (Note
  // [Gathering by mapping] in fsdp/mapped_path.cc): its storage is never released, and a peer's later writes to its
  // shard show through it.
  bool is_mapped(size_t i) const;
  State state() const { return state_; }
  bool is_unsharded() const { return state_ == State::kUnsharded; }
  const DeviceMesh& mesh() const { return mesh_; }
  const FsdpOptions& options() const { return options_; }

  // ---- lifecycle ----
  // Starts the all-gather (no-op when unsharded or in flight). Not async: waits too.
  void unshard(bool async = true);
  // Finishes the all-gather and the copy-out (no-op when unsharded). Rethrows the collective's error.
  void wait_for_unshard();
  // Frees the gathered memory. post_forward: keep the 1/k share when reshard_after_forward is an integer k.
  void reshard(bool post_forward = false);

  // ---- gradients ----
  // Parameter i's gradient (the unsharded layout: unsharded_param(i)'s shape, mesh and placements, or Partial over
  // them; any floating dtype). Summed with an earlier one of the same step (or of steps without gradient sync).
  void accumulate_grad(size_t i, DTensor grad);
  // How many parameters hold an accumulated gradient since the last reduction.
  int64_t grads_received() const;
  // Starts the reduce-scatter (and the HSDP all-reduce) of the accumulated gradients (no-op when none; when
  // gradient sync is off, keeps them unsharded for the next backward instead).
  void reduce_grads();
  // Waits for the reduction; after it sharded_grad(i) holds parameter i's gradient shard (undefined when it got
  // none), divided by the divide factor, in reduce_dtype, with sharded_param(i)'s spec.
  void wait_for_reduce();
  bool reduce_pending() const;
  const DTensor& sharded_grad(size_t i) const;
  // Takes the reduced gradients out (fully_shard moves them into the Variables).
  std::vector<DTensor> take_sharded_grads();
  void set_requires_gradient_sync(bool on) { sync_grads_ = on; }
  // The divide factor of the next reductions (FSDP2's set_gradient_divide_factor; unset: the average over the
  // mesh's ranks). Waits for a reduction in flight first (it divides by the factor it started with).
  void set_gradient_divide_factor(std::optional<double> factor);
  bool requires_gradient_sync() const { return sync_grads_; }

  // ---- memory (bytes on this rank) ----
  int64_t sharded_bytes() const;         // the shards
  int64_t unsharded_bytes() const;       // the gathered parameters (param_dtype)
  int64_t unsharded_grad_bytes() const;  // the gradients before reduction (reduce_dtype)
  int64_t gather_buffer_bytes() const;   // the all-gather buffer (every rank's slot)
  int64_t reduce_buffer_bytes() const;   // the reduce-scatter inputs (every rank's slot)

  struct Impl;

 private:
  std::string name_;
  DeviceMesh mesh_;
  FsdpOptions options_;
  std::vector<std::string> names_;
  State state_ = State::kSharded;
  bool sync_grads_ = true;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dt::fsdp
