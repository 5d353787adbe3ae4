// Pairwise exchange (all-to-all and all-to-allv), transport-free: in step s = 1 .. n-1 rank r sends its block for
// rank (r + s) and receives the block from rank (r - s), so every step is a permutation and no rank is the target of
// two senders at once. Step 0 is the local copy of the rank's own block.
#pragma once

#include "collectives/algorithms/ring.h"

namespace dt::algorithms::pairwise {

inline int steps(int n) { return n; }
inline int send_peer(int rank, int n, int step) { return mod(int64_t(rank) + step, n); }
inline int recv_peer(int rank, int n, int step) { return mod(int64_t(rank) - step, n); }

}  // namespace dt::algorithms::pairwise
