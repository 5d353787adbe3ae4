// The collective start of a save or an export: validate the tensors, reduce Partial ones, agree across ranks on
// the list and a save id, and plan who writes which block (plan.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/plan.h"

namespace dt::checkpoint {

struct Prepared {
  CommunicatorPtr world;
  std::vector<SavedTensor> tensors;
  std::vector<DTensor> values;  // Partial ones reduced to Replicate
  std::vector<std::vector<PlannedBlock>> plan;
  std::string save_id;  // 16 hex digits, rank 0's
};

// `what` names the operation for messages ("checkpoint save to 'dir'"); `salt` is mixed into the agreement (an
// option that must be equal everywhere). Collective over the tensors' world; InvalidArgument on every rank when the
// ranks passed different tensors, naming them.
Prepared prepare(const std::string& what, const TensorList& tensors, int64_t salt);

// The host bytes of this rank's block of value (contiguous; device blocks copied to the host; `own`: never a view of
// the tensor's storage).
Tensor host_block(const DTensor& value, bool own);

}  // namespace dt::checkpoint
