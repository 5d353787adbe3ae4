// The UCX communicator: host memory over whatever UCX finds (shared memory, TCP, InfiniBand), for N processes on one
// machine or many. Device (CUDA) buffers are staged through pinned host memory (slow, logged once); NCCL is the
// backend for those.
//
//   auto comm = dt::init_process_group();            // collectives/process_group.h, under dtrun / torchrun / ...
//   comm->all_reduce(tensor, dt::ReduceOp::kSum)->wait();
//
// Algorithms are chosen per call by size (collectives/ucx/algorithm_table.h); how progress is made and failures are
// detected is described in collectives/ucx/worker.h (Note [UCX progress], Note [UCX failure detection]).
#pragma once

#include <memory>
#include <string_view>

#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "collectives/ucx/algorithm_table.h"

namespace dt {

namespace ucx {
class UcxWorker;
struct CommState;
}  // namespace ucx

class UcxCommunicator final : public Communicator {
 public:
  UcxCommunicator(std::shared_ptr<ucx::UcxWorker> worker, std::shared_ptr<ucx::CommState> state);
  ~UcxCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string backend_name() const override { return "ucx"; }
  bool supports(const Device& device) const override;
  bool supports_views(const Device& device) const override { return device.is_cpu(); }
  bool supports_segments(const Device& device) const override { return device.is_cpu(); }
  std::vector<int> global_ranks() const override;
  // Collective over this group. The new group shares this process's UCX worker; its calls never match this
  // group's (the tag carries a communicator id taken from the store).
  std::shared_ptr<Communicator> split(int color, int key) override;
  Work::Duration timeout() const override;
  std::exception_ptr health() const override;

  // The deadline of every call issued from now on (default DT_TIMEOUT_S). Local.
  void set_timeout(Work::Duration timeout);
  // Algorithm thresholds and chunk sizes. Every rank of the group must use the same tuning (the choice of algorithm
  // must agree); set it at the same point of the call sequence on all ranks.
  ucx::UcxTuning tuning() const;
  void set_tuning(const ucx::UcxTuning& tuning);
  // Forces algorithms by name from now on, as DT_UCX_ALGORITHM does ("all_reduce:direct,all_gather:ring"; "" clears
  // them): see collectives/ucx/algorithm_table.h. Same rule as set_tuning: on all ranks at the same point.
  void set_algorithms(std::string_view spec);
  // The communicator id carried in the UCX tags (0 for the world).
  uint32_t id() const;

 protected:
  WorkPtr enqueue(const CollectiveArgs& args) override;
  void skip_call(const CollectiveArgs& args) override;

 private:
  WorkPtr enqueue_host(const CollectiveArgs& args, std::function<void()> on_success = nullptr);
#ifdef DT_WITH_CUDA
  WorkPtr enqueue_staged(const CollectiveArgs& args);
#endif

  std::shared_ptr<ucx::UcxWorker> worker_;
  std::shared_ptr<ucx::CommState> state_;
};

// The world communicator over UCX: this process is `rank` of `world_size`; the processes meet through `store`
// (worker addresses and process identities are published there). Collective: every rank calls it with a store of
// the same job.
std::shared_ptr<Communicator> create_ucx_communicator(std::shared_ptr<Store> store, int rank, int world_size);

}  // namespace dt
