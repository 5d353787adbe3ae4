// Recursive doubling (all-reduce for small messages), transport-free.
//
// With n a power of two, round k pairs rank r with r ^ 2^k; both exchange their whole partial result and combine,
// so after log2(n) rounds every rank holds the full reduction. Other n fold first (Rabenseifner): with
// p = the largest power of two <= n and rem = n - p, among ranks 0 .. 2*rem-1 each even rank ("extra") sends its
// input to the odd rank above it and waits; the odd ranks and the ranks >= 2*rem (p in all) run the doubling with
// virtual ranks 0 .. p-1; at the end every odd rank < 2*rem sends the result back to its extra partner.
//
// Combining order: a pair always computes op(lower virtual rank's data, higher's), so both partners get bit-identical
// results even for non-associative floating-point sums.
#pragma once

#include <cstdint>

namespace dt::algorithms {

struct RecursiveDoubling {
  int n = 1;
  int rank = 0;
  int pof2 = 1;  // largest power of two <= n
  int rem = 0;   // n - pof2

  RecursiveDoubling(int rank_, int n_) : n(n_), rank(rank_) {
    while (pof2 * 2 <= n) pof2 *= 2;
    rem = n - pof2;
  }
  // True for the even ranks below 2*rem: they hand their input to rank+1 and receive the result from it.
  bool is_extra() const { return rank < 2 * rem && rank % 2 == 0; }
  // For ranks below 2*rem: the partner of the fold (extra <-> odd neighbour); -1 otherwise.
  int fold_partner() const { return rank < 2 * rem ? (rank % 2 == 0 ? rank + 1 : rank - 1) : -1; }
  // Virtual rank among the pof2 participants, or -1 for an extra rank.
  int vrank() const {
    if (is_extra()) return -1;
    return rank < 2 * rem ? rank / 2 : rank - rem;
  }
  static int real_rank(int vrank, int rem) { return vrank < rem ? 2 * vrank + 1 : vrank + rem; }
  int rounds() const {
    int r = 0;
    while ((1 << r) < pof2) ++r;
    return r;
  }
  // The real rank this participant exchanges with in `round`.
  int partner(int round) const { return real_rank(vrank() ^ (1 << round), rem); }
  // Whether this participant's data is the left operand of the combine in `round`.
  bool lower_in(int round) const { return (vrank() & (1 << round)) == 0; }
};

}  // namespace dt::algorithms
