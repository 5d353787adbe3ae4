// The debug signature check (DT_DEBUG_COLLECTIVES=1), as a wrapper communicator (c10d's ProcessGroupWrapper is the
// model): before every group-wide call, the members exchange the call's CallSignature and its sequence number
// through the wrapped communicator (all_gather_ints), and a mismatch is a dt::InvalidArgument on every rank naming
// the ranks and what each called. The exchange blocks the caller, so in this mode calls are synchronous up to the
// check. Point-to-point calls are not checked (they involve two ranks only); a group of one has nothing to check.
//
// Where communicators are made (init_process_group, the thread backend's worlds, NCCL's init_process_group, and
// every backend's split()) maybe_wrap_debug applies the wrapper when the variable is set; a wrapper's splits are
// wrapped too. Observers (communication counters) see each call once, on the wrapper, and not the exchange; the
// wrapped communicator's funnel validates again and records both in the flight recorder they share. The wrapper's
// funnel validates first, so a bad call fails before the exchange instead of leaving the peers waiting in it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

class DebugCommunicator final : public Communicator {
 public:
  explicit DebugCommunicator(CommunicatorPtr inner);

  const CommunicatorPtr& inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  bool supports(const Device& device) const override { return inner_->supports(device); }
  std::vector<int> global_ranks() const override { return inner_->global_ranks(); }
  // Splits the wrapped communicator; the new group is wrapped too.
  std::shared_ptr<Communicator> split(int color, int key) override;
  bool supports_views(const Device& device) const override { return inner_->supports_views(device); }
  bool supports_segments(const Device& device) const override { return inner_->supports_segments(device); }
  Device home_device() const override { return inner_->home_device(); }
  Work::Duration timeout() const override { return inner_->timeout(); }

 protected:
  WorkPtr enqueue(const CollectiveArgs& args) override;

 private:
  CommunicatorPtr inner_;
};

// Whether DT_DEBUG_COLLECTIVES is set (to anything but "" and "0"); read once.
bool debug_collectives_enabled();
// `comm` wrapped in a DebugCommunicator when debug_collectives_enabled(); else (and for null, or a communicator
// that is a DebugCommunicator already) `comm` itself.
CommunicatorPtr maybe_wrap_debug(CommunicatorPtr comm);

}  // namespace dt
