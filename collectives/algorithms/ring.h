// Ring index math, transport-free (UCC's coll_patterns/ring.h is the model). Ranks form the ring 0 -> 1 -> ... ->
// n-1 -> 0; every step each rank sends one block to its right neighbour and receives one from its left neighbour.
//
// All-gather (n-1 steps): at step s rank r sends block (r - s) and receives block (r - s - 1), so after the last step
// it holds every block. Each block travels n-1 hops and is forwarded as soon as it arrives.
//
// Reduce-scatter (n-1 steps): at step s rank r sends its partial sum of block (r - s - 1) and receives the partial
// sum of block (r - s - 2) from its left neighbour, which it combines with its own input for that block. The block
// received at the last step (s = n-2) is block r itself: after the last combine rank r holds block r reduced over
// every rank. Step 0 sends straight from the input; later steps send what the previous step produced.
//
// Pipelining: a block is cut into chunks (see Chunking) and step s of chunk c only waits for step s-1 of chunk c, so
// several steps are in flight at once.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dt::algorithms {

inline int mod(int64_t a, int n) { return int(((a % n) + n) % n); }

namespace ring {

inline int right(int rank, int n) { return mod(rank + 1, n); }
inline int left(int rank, int n) { return mod(rank - 1, n); }
inline int steps(int n) { return n - 1; }

inline int all_gather_send_block(int rank, int n, int step) { return mod(int64_t(rank) - step, n); }
inline int all_gather_recv_block(int rank, int n, int step) { return mod(int64_t(rank) - step - 1, n); }

inline int reduce_scatter_send_block(int rank, int n, int step) { return mod(int64_t(rank) - step - 1, n); }
inline int reduce_scatter_recv_block(int rank, int n, int step) { return mod(int64_t(rank) - step - 2, n); }

}  // namespace ring

// Element ranges of a buffer of `count` elements cut into `n` blocks of ceil(count / n) elements (torch.chunk rule:
// trailing blocks may be short or empty). Used by all-reduce, whose count need not divide by the group size.
struct Blocks {
  int64_t count = 0;
  int n = 1;
  int64_t block = 0;  // elements of a full block

  Blocks() = default;
  Blocks(int64_t count_, int n_) : count(count_), n(n_), block(n_ > 0 ? (count_ + n_ - 1) / n_ : 0) {}
  int64_t offset(int b) const { return std::min(count, int64_t(b) * block); }
  int64_t size(int b) const { return std::min(count, offset(b) + block) - offset(b); }
};

// A block of `count` elements cut into `chunks` pieces of ceil(count / chunks) elements (trailing pieces may be
// short or empty). Every rank computes the same cut from the same (count, chunks), so the pieces match up.
struct Chunking {
  int64_t count = 0;
  int64_t chunks = 1;
  int64_t piece = 0;

  Chunking() = default;
  Chunking(int64_t count_, int64_t chunks_)
      : count(count_), chunks(std::max<int64_t>(1, chunks_)), piece((count_ + chunks - 1) / chunks) {}
  // The number of chunks for `count` elements of `elem_size` bytes with chunks of about `chunk_bytes` (at least 1).
  static int64_t chunks_for(int64_t count, int64_t elem_size, int64_t chunk_bytes) {
    if (chunk_bytes <= 0) return 1;
    const int64_t elems = std::max<int64_t>(1, chunk_bytes / std::max<int64_t>(1, elem_size));
    return std::max<int64_t>(1, (count + elems - 1) / elems);
  }
  int64_t offset(int64_t c) const { return std::min(count, c * piece); }
  int64_t size(int64_t c) const { return std::min(count, offset(c) + piece) - offset(c); }
};

}  // namespace dt::algorithms
