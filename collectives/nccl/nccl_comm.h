// The NCCL backend: collectives on CUDA device memory. Compiled when CUDA is on and NCCL was found.
//
// - One NCCL communicator (non-blocking config, so that it can be aborted) and one internal stream per
//   communicator. Each call records an event on the caller's stream (CollectiveArgs::stream; nullptr is the legacy
//   default stream), makes the internal stream wait for it, issues the NCCL call on the internal stream and
//   records a completion event. wait() makes the caller's stream wait for that event (so work queued there
//   afterwards is ordered after the collective on the device) and blocks the host until the operation finished (or
//   its deadline passed).
// - send/recv are queued and issued together, as one NCCL group, when a Work of one of them is waited on or tested,
//   or before the next collective (Note [NCCL point-to-point groups] in nccl_comm.cc): post every send and recv of an
//   exchange before waiting on any of them.
// - A watchdog thread turns operations that run past the communicator's timeout and asynchronous NCCL errors
//   (ncclCommGetAsyncError) into errors on every pending Work and aborts the communicator (ncclCommAbort). After an
//   abort every call fails with dt::RemoteError naming the reason.
// - Reduce ops: sum, max, min, product map to NCCL's; avg maps to ncclAvg for floating types and to a sum followed
//   by a truncating division for integers (as the other backends). bool reduces as logical or (sum, avg, max) and
//   logical and (min, product) on bytes.
// - all_to_all(v) are grouped ncclSend/ncclRecv (the own block is a device copy); overlapping send and recv
//   buffers are staged through a temporary device buffer.
// - NCCL refuses two ranks of one communicator on the same GPU: one rank per device.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/store/store.h"

namespace dt {

struct NcclOptions {
  // Deadline of every operation (the watchdog aborts the communicator past it).
  Work::Duration timeout = default_timeout();
  // Deadline of initialization and of splits (every peer must arrive, NCCL sets up its transports): 0 means the
  // larger of `timeout` and 2 minutes, so that a short operation timeout does not bound them.
  Work::Duration init_timeout{0};
  // Key of the ncclUniqueId in the bootstrap exchange: make it unique per communicator created over one store.
  std::string key = "nccl/unique_id";
};

// A communicator the caller made, handed to adopt() (a host framework's: Note [Adopted NCCL communicators]).
struct NcclAdoptOptions {
  // Deadline of every operation dtensor issues on it (past it dtensor's pending calls fail).
  Work::Duration timeout = default_timeout();
  // Deadline of splits (0: the larger of `timeout` and 2 minutes).
  Work::Duration init_timeout{0};
  // Whether dtensor may ncclCommAbort the communicator on a timeout or an asynchronous NCCL error. false (the
  // default): dtensor fails its own pending and later calls and leaves the communicator to its owner, who must abort
  // it (the handle is the owner's; an abort frees it). true: dtensor aborts it, as it does its own.
  bool may_abort = false;
  // The world ranks of the communicator's ranks, for error messages and sub-mesh bookkeeping (empty: 0..size-1).
  std::vector<int> global_ranks;
};

// The bootstrap exchange of create(): rank 0 calls it with the value to publish (and gets it back); the other
// ranks call it with nullopt and get rank 0's value, waiting until it is there (with a deadline).
using NcclExchange = std::function<std::string(const std::string& key, const std::optional<std::string>& value)>;

namespace nccl_detail {
struct NcclState;
}

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `size` processes (or threads), one per GPU: rank 0 creates the ncclUniqueId and publishes it
  // through `exchange`. Throws dt::Unsupported when `device` is unusable, dt::TimeoutError when the peers do not
  // join within options.timeout.
  static std::shared_ptr<NcclCommunicator> create(int rank, int size, Device device, const NcclExchange& exchange,
                                                  NcclOptions options = {});
  // The same, bootstrapped through a Store (set/get of options.key).
  static std::shared_ptr<NcclCommunicator> create(Store& store, int rank, int size, Device device,
                                                  NcclOptions options = {}) {
    return create(
        rank, size, device,
        [&store](const std::string& key, const std::optional<std::string>& value) {
          if (value) {
            store.set(key, *value);
            return *value;
          }
          return store.get(key);
        },
        std::move(options));
  }

  // Issues dtensor's collectives on `nccl_comm`, an ncclComm_t the caller created and keeps owning (void* so that
  // this header needs no NCCL): rank, size and device are the communicator's. dtensor never finalizes or destroys
  // it; the caller destroys it after the last communicator, mesh and tensor using it are gone. Splits (meshes) make
  // new communicators that dtensor owns. Throws InvalidArgument for a null or failed communicator.
  static std::shared_ptr<NcclCommunicator> adopt(void* nccl_comm, NcclAdoptOptions options = {});

  explicit NcclCommunicator(std::shared_ptr<nccl_detail::NcclState> state);  // use create(), adopt() or split()
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::string backend_name() const override { return "nccl"; }
  bool supports(const Device& device) const override;  // the communicator's own GPU only
  std::vector<int> global_ranks() const override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  Work::Duration timeout() const override;
  Device home_device() const override { return device(); }

  Device device() const;
  // Aborts the NCCL communicator: pending Works fail with dt::RemoteError carrying `reason`, later calls too.
  // Idempotent; safe from any thread.
  void abort(const std::string& reason);
  bool aborted() const;

 protected:
  WorkPtr enqueue(const CollectiveArgs& args) override;

 private:
  std::shared_ptr<nccl_detail::NcclState> state_;
};

// "2.28.9" (the NCCL library this process loaded).
std::string nccl_version();

}  // namespace dt
