// The mapped data path (fsdp/data_path.h; Note [Gathering by mapping] in fsdp/mapped_path.cc): on one host, the
// unsharded values of the parameters whose shards are whole pages map every rank's shard; the segmented all-gather
// carries only the rest, and a token that proves every rank reached the same unshard. Gathers only: the reduction
// takes the segmented path.
#pragma once

#include <memory>
#include <vector>

#include "fsdp/segmented_path.h"

namespace dt {
class HostWindow;
}

namespace dt::fsdp {

class MappedPath : public SegmentedPath {
 public:
  // A host group of two ranks or more that gathers each shard as it is (no cast, no offload, no post-forward
  // share) through segmented blocks.
  static bool admits(const GroupData& g, Direction d);
  // Maps what can be mapped (collective over the shard dim); null on every rank when nothing is.
  static std::unique_ptr<DataPath> make(GroupData& g);
  MappedPath(GroupData& g, std::shared_ptr<HostWindow> window);

  Issued start_gather() override;
  void finish_gather() override;  // checks the tokens

 private:
  std::shared_ptr<HostWindow> window_;
  int64_t unshards_ = 0;         // this rank's count of unshards, sent as the token
  std::vector<int64_t> tokens_;  // every rank's, received
};

}  // namespace dt::fsdp
