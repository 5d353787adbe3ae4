// The trace clock's alignment across ranks (Note [The trace recorder] in core/trace.h): every rank's offset against
// rank 0's clock, by ping-pong over the world communicator.
#pragma once

#include <cstdint>

#include "collectives/communicator.h"

namespace dt {

struct ClockOffset {
  int64_t offset_ns = 0;       // rank 0's clock minus this rank's
  int64_t uncertainty_ns = 0;  // half the round trip of the exchange used
};

// Collective over `world`: rank r exchanges `rounds` timestamps with rank 0 (rank 0 serves the ranks in order) and
// keeps the exchange with the least round trip, offset = t_reference - (t_send + t_receive) / 2. Rank 0 gets {0, 0}.
// `max_uncertainty_ns`, when given, receives the largest uncertainty over the ranks (on rank 0; its own elsewhere).
// Needs a communicator that takes host buffers; others (NCCL) return {0, -1}: not estimated.
ClockOffset estimate_clock_offset(Communicator& world, int rounds = 16, int64_t* max_uncertainty_ns = nullptr);

// When DT_TRACE names a folder: starts this rank's trace there, aligned to rank 0's clock, and says so on rank 0.
// Called by init_process_group; destroy_process_group stops it (writing the file).
void start_trace_from_env(Communicator& world);

}  // namespace dt
