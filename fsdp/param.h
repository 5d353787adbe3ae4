// One parameter of an FSDP group (PyTorch's FSDPParam): its layout, its shard (the only persistent copy), the stable
// storage of its unsharded value, its accumulated gradient and its reduced gradient shard, and the transitions of
// each. The group (fsdp/param_group.h) orders the transitions; the data paths (fsdp/data_path.h) move the bytes.
#pragma once

#include <cstdint>
#include <memory>

#include "collectives/communicator.h"
#include "dtensor/dtensor.h"
#include "fsdp/layout.h"

namespace dt {
class HostWindow;
}

namespace dt::fsdp {

class Param {
 public:
  // Makes the shard of `value` (a local slice) and the unsharded storage (released until the first gather).
  Param(const DTensor& value, const ParamLayout& layout, const Device& device, bool cpu_offload);

  const ParamLayout& layout() const { return *layout_; }
  const DTensor& shard() const { return shard_; }
  // The gathered value (param_dtype; the original mesh and placements); its storage is the same object for life.
  const DTensor& unsharded() const { return unsharded_; }
  // Whether the unsharded value maps every rank's shard (Note [Gathering by mapping] in fsdp/mapped_path.cc).
  bool mapped() const { return mapped_; }
  // The unsharded storage's bytes (while allocated).
  void* unsharded_data() const { return storage_->data(); }

  // ---- rank r's rows (dim 0 of the unsharded local block; Note [Padding stays in the flat buffers]) ----
  IndexRange rows(int64_t rank) const { return layout_->rows_of(rank); }
  int64_t row_bytes(DType dtype) const { return layout_->row_numel * int64_t(dtype_size(dtype)); }
  // Rank r's rows of `flat`, a flat tensor of this parameter's unsharded local numel.
  Tensor rows_of(const Tensor& flat, int64_t rank) const;
  // Rank r's rows of a buffer laid out as the unsharded local block in `dtype` at `base` (null: none, an empty
  // segment), as a segment at `at` bytes into a block.
  Segment rows_segment(int64_t rank, int64_t at, void* base, DType dtype) const;

  // ---- the unsharded storage ----
  // Sized for the gather to fill (a mapped parameter keeps its range).
  void allocate_unsharded();
  // Frees it (a mapped parameter keeps its range).
  void release_unsharded();
  // Moves the shard into `window` at `offset` and makes the unsharded value its range `range` (Note [Gathering by
  // mapping]).
  void map_into(const std::shared_ptr<HostWindow>& window, size_t range, int64_t offset);

  // ---- gradients ----
  // Sums `grad` (the unsharded layout, or Partial over it; any floating dtype) into the accumulated gradient, in
  // reduce_dtype and the unsharded value's layout.
  void accumulate_grad(DTensor grad);
  bool has_grad() const { return acc_.defined(); }
  const DTensor& grad() const { return acc_; }
  // A reduction starts: has_reduced_grad() says from now on whether there was a gradient to reduce.
  void start_reduce() { reduced_has_grad_ = acc_.defined(); }
  // The reduction has read the accumulated gradient (or keeps its own reference until it finishes).
  void drop_grad() { acc_ = DTensor(); }
  bool has_reduced_grad() const { return reduced_has_grad_; }
  // The reduced gradient shard from `values` (reduce_dtype, this rank's shard shape): cast to the shard's dtype and
  // moved to its device where they differ.
  void set_sharded_grad(Tensor values);
  const DTensor& sharded_grad() const { return sharded_grad_; }
  DTensor take_sharded_grad();

 private:
  const ParamLayout* layout_;
  DTensor shard_;
  std::shared_ptr<Storage> storage_;  // the unsharded value's
  DTensor unsharded_;
  bool mapped_ = false;
  DTensor acc_;  // reduce_dtype, the unsharded layout
  bool reduced_has_grad_ = false;
  DTensor sharded_grad_;
};

}  // namespace dt::fsdp
