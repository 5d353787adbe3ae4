// Small integer metadata exchanged across a group: mesh checks, from_local's and distribute_tensor's checks, splits,
// the debug signature check. One rule for all of them: the values travel through the communicator's home device
// (Communicator::home_device()), since a backend may accept only its own device's memory (NCCL takes CUDA buffers
// only). The exchange is a collective call like any other: every member calls it, in the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

// Gathers `mine` (the same length on every rank) from every member: the result holds size() * mine.size() values,
// member r's at [r * mine.size(), (r + 1) * mine.size()). A group of one returns `mine` without a call.
std::vector<int64_t> all_gather_ints(Communicator& comm, const std::vector<int64_t>& mine);

// Communicator::split's membership rule, for every backend: the members of the new group of `color` are the parent
// ranks that passed that color, ordered by (key, parent rank) as MPI_Comm_split and ncclCommSplit order them.
// `color_key` holds every parent rank's (color, key): rank r's at [2r, 2r + 1] (what all_gather_ints returns for
// {color, key}). Returns parent ranks; empty for a negative color (not in any new group).
std::vector<int> split_members(const std::vector<int64_t>& color_key, int64_t color);

}  // namespace dt
