// Dissemination barrier, transport-free: in round k (0 .. ceil(log2 n) - 1) rank r notifies rank r + 2^k and waits
// for rank r - 2^k. After the last round every rank has (transitively) heard from every other, so none leaves
// before all have arrived.
#pragma once

#include "collectives/algorithms/ring.h"

namespace dt::algorithms::dissemination {

inline int rounds(int n) {
  int r = 0;
  while ((1 << r) < n) ++r;
  return r;
}
inline int send_peer(int rank, int n, int round) { return mod(int64_t(rank) + (int64_t(1) << round), n); }
inline int recv_peer(int rank, int n, int round) { return mod(int64_t(rank) - (int64_t(1) << round), n); }

}  // namespace dt::algorithms::dissemination
