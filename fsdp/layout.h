// The layout of one FSDP parameter group: where each parameter's shard lives (its spec on the mesh it and the FSDP
// mesh come from) and where its rows sit in the flat all-gather and reduce-scatter buffers. Pure arithmetic over the
// placement layer's layout math, computed once per group (fsdp/param_group.h; Note [Padding stays in the flat
// buffers] there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "fsdp/options.h"
#include "placement/layout.h"

namespace dt::fsdp {

struct ParamLayout {
  std::string name;
  // The parameter as the module computes with it (whole, or sharded by tensor parallelism).
  DeviceMesh orig_mesh;
  ShardingSpec orig_spec;
  Shape global_shape;
  Shape unsharded_local_shape;
  DType orig_dtype = DType::f32;
  DType param_dtype = DType::f32;   // gathered
  DType reduce_dtype = DType::f32;  // reduced
  // Dim 0 of the unsharded local block over the shard dim: `rows` rows of `row_numel` elements, chunks of `chunk`.
  int64_t rows = 0, row_numel = 1, chunk = 0, shard_size = 1;
  int64_t padded_numel = 0;         // the parameter's region in an all-gather slot (param_dtype elements)
  int64_t slot_byte_offset = 0;     // where that region starts in the slot
  int64_t reduce_padded_numel = 0;  // its region in a reduce-scatter slot (reduce_dtype elements)
  // The shard: its mesh (the FSDP mesh, or the mesh both come from), spec and this rank's block shape.
  DeviceMesh shard_mesh;
  ShardingSpec shard_spec;
  Shape sharded_local_shape;

  IndexRange rows_of(int64_t shard_rank) const { return chunk_range(rows, shard_size, shard_rank); }
  int64_t unsharded_numel() const { return shape_numel(unsharded_local_shape); }
};

// Consecutive parameters of one param_dtype: one chunk_cat / split_copy call per slot.
struct SlotRun {
  size_t first = 0, last = 0;  // [first, last) parameter indices
  DType dtype = DType::f32;
  int64_t byte_offset = 0;  // within a slot
};

// The parameters reduced together (one reduce-scatter): those of one reduce_dtype.
struct ReduceClass {
  DType dtype = DType::f32;
  std::vector<size_t> members;
  int64_t slot_numel = 0;
};

struct GroupLayout {
  std::vector<ParamLayout> params;
  std::vector<SlotRun> runs;
  int64_t slot_bytes = 0;  // one rank's slot of the all-gather buffer
  int64_t shard_size = 1;  // ranks of the shard dim
  std::vector<ReduceClass> reduce_classes;
  // Gradient division (FsdpOptions::gradient_divide_factor): either the collectives average (kAvg, the default
  // for 32- and 16-bit brain floats), or the sum is divided before (pre) and after (post) the reduction: f16 splits
  // the factor so that neither the summands nor the sum overflow (PyTorch's rule).
  bool average_in_collective = false;
  double pre_divide = 1, post_divide = 1;
};

// Validates the parameters against the FSDP mesh (1-d, or 2-d for HSDP) and lays them out. InvalidArgument names
// the parameter: a scalar, a Partial placement, a parameter already sharded on the FSDP mesh, a parameter whose
// mesh does not come from the same mesh as the FSDP mesh.
GroupLayout make_group_layout(const std::vector<std::string>& names, const std::vector<DTensor>& params,
                              const DeviceMesh& mesh, const FsdpOptions& options);

// The gradient division fields of `g` from options.gradient_divide_factor (unset: the average over the mesh's ranks):
// make_group_layout sets them, ParamGroup::set_gradient_divide_factor again. InvalidArgument, with `g` unchanged, for
// a factor that is not positive and finite.
void set_gradient_division(GroupLayout& g, const DeviceMesh& mesh, const FsdpOptions& options);

// This rank's shard of a parameter (a copy of its rows: the only persistent copy from now on), on the host when
// cpu_offload is set.
DTensor make_shard(const DTensor& param, const ParamLayout& p, bool cpu_offload);

}  // namespace dt::fsdp
