// The segmented data path (fsdp/data_path.h; Note [Gathering into the parameters] in fsdp/segmented_path.cc): the
// group's collectives take segmented blocks, so the all-gather writes every rank's rows straight into the unsharded
// storages and the reduce-scatter reads the gradients where they lie.
#pragma once

#include <memory>
#include <vector>

#include "fsdp/data_path.h"

namespace dt::fsdp {

class SegmentedPath : public DataPath {
 public:
  // The shard communicator takes segmented blocks on the group's device; a reduction without a pre-division.
  static bool admits(const GroupData& g, Direction d);
  static std::unique_ptr<DataPath> make(GroupData& g) { return std::make_unique<SegmentedPath>(g); }
  explicit SegmentedPath(GroupData& g);

  Issued start_gather() override;
  void finish_gather() override;
  Issued start_reduce(size_t c, const Tensor& out, ReduceOp op) override;
  void finish_reduce(size_t c) override;

 protected:
  struct GatherSegments {
    std::vector<Segment> send;
    std::vector<std::vector<Segment>> recv;  // per rank
  };
  // Sizes the unsharded storages and lists the all-gather's segments: every parameter not mapped, at its offset in
  // the block.
  GatherSegments gather_segments();
  Issued issue_gather(GatherSegments segments);

  // The all-gather's block: each parameter's offset in it, and its size (the slot's, unless a subclass packs it).
  std::vector<int64_t> block_offset_;
  int64_t block_bytes_ = 0;

 private:
  // Whether every shard is already what its region of this rank's slot would hold (param_dtype, on the group's
  // device, contiguous): then the gather sends the shards themselves.
  bool shards_are_the_slot() const;
  // A shard group of one on the host: its gather and reduction are copies made here (Note [A shard group of one]).
  bool alone() const;

  Tensor staged_;  // this rank's slot, when the shards are not it
  // Per reduce class: the memory of the gradients its reduce-scatter reads (the storages only: this runs per
  // parameter and step, and a tensor copy allocates its shape and strides).
  std::vector<std::vector<std::shared_ptr<Storage>>> sources_;
};

}  // namespace dt::fsdp
