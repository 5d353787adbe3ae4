// Broadcast index math, transport-free: a binomial tree (small messages: log2(n) hops) and a pipelined chain
// (large messages: each chunk flows root -> root+1 -> ... and every link is busy at once).
//
// Both work on virtual ranks relative to the root: v = (rank - root) mod n, so the root is v = 0.
#pragma once

#include <vector>

#include "collectives/algorithms/ring.h"

namespace dt::algorithms {

inline int relative_rank(int rank, int root, int n) { return mod(int64_t(rank) - root, n); }
inline int absolute_rank(int vrank, int root, int n) { return mod(int64_t(vrank) + root, n); }

namespace binomial {

// Parent of virtual rank v > 0: v with its lowest set bit cleared. The root has none (-1).
inline int parent(int v) { return v == 0 ? -1 : (v & (v - 1)); }

// Children of v, the largest subtree first (so the longest path starts earliest): v + 2^k for every 2^k below v's
// lowest set bit (any k for the root) with v + 2^k < n.
inline std::vector<int> children(int v, int n) {
  int limit = 1;
  while (limit < n) limit <<= 1;
  const int low = v == 0 ? limit : (v & -v);
  std::vector<int> out;
  for (int bit = low >> 1; bit >= 1; bit >>= 1)
    if (v + bit < n) out.push_back(v + bit);
  return out;
}

}  // namespace binomial

namespace chain {
inline int prev(int v) { return v == 0 ? -1 : v - 1; }
inline int next(int v, int n) { return v + 1 < n ? v + 1 : -1; }
}  // namespace chain

}  // namespace dt::algorithms
