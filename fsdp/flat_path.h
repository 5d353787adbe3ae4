// The flat data path (fsdp/data_path.h): every rank's slot of one flat buffer. Gather: copy-in of each shard (cast
// to param_dtype) into this rank's slot, one all-gather as bytes, copy-out of each parameter's rows from every slot
// into its unsharded storage. Reduce: copy-in of each gradient's rows of every rank (cast to reduce_dtype, a
// pre-division applied) into that rank's slot, one reduce-scatter. Also the post-forward share (reshard_after_forward
// = k): a few slots kept after forward and gathered over k ranks before backward.
#pragma once

#include <vector>

#include "fsdp/data_path.h"

namespace dt::fsdp {

// Copy-in: every shard (cast to param_dtype, padded) into an all-gather slot at `slot`, on `stream`.
void copy_shards_into_slot(const GroupData& g, uint8_t* slot, Stream stream);

class FlatPath : public DataPath {
 public:
  static bool admits(const GroupData&, Direction) { return true; }
  static std::unique_ptr<DataPath> make(GroupData& g) { return std::make_unique<FlatPath>(g); }
  explicit FlatPath(GroupData& g) : DataPath(g) {}

  Issued start_gather() override;
  void finish_gather() override;  // the copy-out
  Issued start_reduce(size_t c, const Tensor& out, ReduceOp op) override;
  void finish_reduce(size_t c) override;

  // The post-forward share: keeps this rank's S/k slots of the gathered parameters (which must be unsharded).
  void keep_share();
  // Gathers the kept share over the k ranks into every slot; finish_gather() copies out as after start_gather().
  Issued start_gather_share();

 private:
  Tensor gathered_;                // every rank's slot, while gathering
  Tensor kept_;                    // the post-forward share, until the gather that restores it
  std::vector<Tensor> reduce_in_;  // per reduce class, while its reduce-scatter runs
};

}  // namespace dt::fsdp
