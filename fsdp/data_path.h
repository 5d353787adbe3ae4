// How an FSDP group's bytes move (PyTorch's _fsdp_collectives.py): one interface, one file per path, chosen from
// one table (fsdp/data_path_table.cc) as collectives/ucx/algorithm_table.cc chooses collective algorithms. A path
// issues the collectives and does the copies around them; the group (fsdp/param_group.h) keeps the state machine,
// the ordering against the caller's stream, the waits and the errors.
//
//   flat       (fsdp/flat_path.cc)       copy-in into one flat buffer, a flat collective, copy-out
//   segmented  (fsdp/segmented_path.cc)  segmented blocks: the collectives take the rows where they lie
//   mapped     (fsdp/mapped_path.cc)     the all-gather maps the peers' shards instead of copying them
//
// A faster path is a new file and a table line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "fsdp/layout.h"
#include "fsdp/param.h"
#include "fsdp/streams.h"

namespace dt::fsdp {

// What the data paths work on: the group's layout, parameters, device, streams and communicators.
struct GroupData {
  std::string name;  // the group's, for messages
  GroupLayout layout;
  std::vector<Param> params;  // layout.params[i]'s
  Device device = Device::cpu();
  EngineStreams streams;
  CommunicatorPtr shard_comm, replicate_comm;
  CommunicatorPtr post_forward_comm;  // reshard_after_forward = k: the k ranks that gather the kept share
  bool cpu_offload = false;

  GroupData() = default;
  GroupData(const GroupData&) = delete;  // the parameters point into the layout
  GroupData& operator=(const GroupData&) = delete;
};

// A collective started, and this rank's bytes sent into it.
struct Issued {
  WorkPtr work;
  int64_t bytes = 0;
};

class DataPath {
 public:
  explicit DataPath(GroupData& group) : g_(group) {}
  virtual ~DataPath() = default;
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // Sizes the unsharded storages and starts the all-gather of every shard, on the all-gather stream (which the
  // group ordered after the caller's).
  virtual Issued start_gather() = 0;
  // After the all-gather (the caller's stream ordered after it): completes the unsharded values on the caller's
  // stream and frees the buffers. Throws what it finds wrong.
  virtual void finish_gather() = 0;
  // Starts reduce class c's reduce-scatter of its members' accumulated gradients into `out` (the class's shard
  // buffer, slot_numel elements), on the reduce-scatter stream.
  virtual Issued start_reduce(size_t c, const Tensor& out, ReduceOp op) = 0;
  // After reduce class c's reduction: frees what its reduce-scatter read.
  virtual void finish_reduce(size_t c) = 0;

 protected:
  GroupData& g_;
};

enum class Direction : uint32_t { kGather = 1, kReduce = 2 };

// The first path of the table that serves `direction` and admits the group. Collective over the shard dim (a
// mapped path makes its window, and may decline on every rank at once).
std::unique_ptr<DataPath> select_data_path(GroupData& group, Direction direction);

}  // namespace dt::fsdp
