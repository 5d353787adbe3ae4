// What FSDP is told: which mesh dims shard and replicate, when to free gathered parameters, mixed precision, CPU
// offload and the gradient divide factor. The names and defaults are PyTorch FSDP2's (torch.distributed.fsdp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace dt::fsdp {

// PyTorch's MixedPrecisionPolicy. Unset fields keep the parameter's own dtype.
struct MixedPrecisionPolicy {
  std::optional<DType> param_dtype =
      std::nullopt;  // the gathered (unsharded) parameters, hence forward and backward compute
  std::optional<DType> reduce_dtype = std::nullopt;  // gradient reduce-scatter / all-reduce (default: param_dtype)
  std::optional<DType> output_dtype = std::nullopt;  // fully_shard casts the module's floating outputs to it
  bool cast_forward_inputs = true;                   // fully_shard casts the module's floating inputs to param_dtype
};

// PyTorch's CPUOffloadPolicy: sharded parameters, their gradients and (by following the parameters) the optimizer
// state live in host memory; the unsharded parameters and the compute stay on the mesh's GPU. For CUDA meshes only.
struct OffloadPolicy {
  bool cpu_offload = false;
};

struct FsdpOptions {
  // The dims of the given mesh FSDP uses, by name (empty: every dim of the mesh). One dim: parameters are sharded
  // over it. Two dims: HSDP, (replicate, shard): sharded over the second, replicated over the first, gradients
  // reduce-scattered over the shard dim and all-reduced over the replicate dim.
  std::vector<std::string> mesh_dims = {};
  // After forward: true frees the gathered parameters (gathered again before backward); false keeps them until
  // after backward; an integer k (1 < k < shard size, dividing it) keeps a 1/k share of them, so that backward
  // gathers over k ranks only (e.g. the ranks of one node). The root module keeps its parameters whatever this says
  // (they are needed at once by backward), as PyTorch does.
  std::variant<bool, int64_t> reshard_after_forward = true;
  MixedPrecisionPolicy mp_policy = {};
  OffloadPolicy offload_policy = {};
  // Gradients are divided by this (default: the data-parallel size, i.e. averaged over the replicas). 1 sums them.
  std::optional<double> gradient_divide_factor = std::nullopt;
};

}  // namespace dt::fsdp
