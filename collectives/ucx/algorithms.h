// The UCX backend's algorithms, one file each; their index math lives in collectives/algorithms/ (transport-free).
// Each builder adds the tasks of one call to `op` (see op.h): the messages, the local arithmetic and the order
// between them. Builders run with the worker lock held, on the caller's thread; they post nothing themselves.
//
// Tag slots (the low 16 tag bits) number the messages of a call between two ranks; each builder documents its own.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/ucx/op.h"

namespace dt::ucx {

// Group of one: copies send to recv where the layout asks for it (local.cc).
void build_local(UcxOp& op);

// all_gather: ring, chunk-pipelined for groups above two (ring_all_gather.cc).
void build_ring_all_gather(UcxOp& op, int64_t chunk_bytes);

// reduce_scatter: ring, chunk-pipelined; the last step lands in `slots` reusable chunk buffers so that the data it
// reduces is still in cache (ring_reduce_scatter.cc).
void build_ring_reduce_scatter(UcxOp& op, int64_t chunk_bytes, int slots);

// all_reduce, large: ring reduce-scatter then ring all-gather; chunk c of the all-gather starts as soon as chunk c
// of this rank's block is reduced (ring_all_reduce.cc).
void build_ring_all_reduce(UcxOp& op, int64_t chunk_bytes, int slots);

// all_reduce, large, members on one host: each reduces its block out of the peers' memory and writes it into theirs
// (direct_all_reduce.cc, Note [Direct all-reduce]).
void build_direct_all_reduce(UcxOp& op, int64_t chunk_bytes);

// all_reduce, small: recursive doubling with whole buffers (recursive_doubling.cc).
void build_recursive_doubling_all_reduce(UcxOp& op);

// broadcast: binomial tree (small) or pipelined chain (large) (broadcast.cc).
void build_binomial_broadcast(UcxOp& op);
void build_chain_broadcast(UcxOp& op, int64_t chunk_bytes);

// all_to_all and all_to_allv: pairwise exchange (all_to_all.cc).
void build_pairwise_all_to_all(UcxOp& op);

// all_gather / all_to_all of strided views (views.cc, Note [Direct view reads]).
void build_views(UcxOp& op, int64_t direct_min_bytes);

// all_gather / reduce_scatter of segmented blocks (segments.cc, Note [Direct segment reads]).
void build_segments(UcxOp& op, int64_t direct_min_bytes);

// barrier: dissemination (barrier.cc).
void build_dissemination_barrier(UcxOp& op);

// send / recv: one message (barrier.cc).
void build_point_to_point(UcxOp& op);

namespace detail {

// Where each block of a reduce-scatter / all-gather ring lives: block b is `size[b]` elements at element `offset[b]`
// of the buffer; every block is cut into `chunks` pieces (algorithms::Chunking).
struct RingLayout {
  explicit RingLayout(int n) {  // room for n blocks: one allocation per list
    offset.reserve(size_t(n));
    size.reserve(size_t(n));
  }
  std::vector<int64_t> offset, size;
  int64_t chunks = 1;
};

// The reduce-scatter ring over `in` (layout L); the fully reduced chunks of this rank's block are written to `out`
// (divided by the group size when `divide`). Slots slot_base .. slot_base + (n-1)*chunks - 1.
struct ReduceScatterTasks {
  std::vector<int> final_chunk;                              // per chunk: the task after which out's chunk is final
  std::vector<std::vector<std::vector<int>>> input_readers;  // [block][chunk]: tasks reading that chunk of `in`
};
ReduceScatterTasks add_ring_reduce_scatter(UcxOp& op, const RingLayout& L, const char* in, char* out, int slots,
                                           bool divide, uint32_t slot_base);

// The all-gather ring into `out` (layout L). Chunk c of this rank's own block is sent from first_src(c), once the
// tasks in own_ready[c] are done; a received chunk of block b waits for the tasks in out_busy[b][c] (they still read
// what it overwrites). Slots slot_base .. slot_base + (n-1)*chunks - 1.
void add_ring_all_gather(UcxOp& op, const RingLayout& L, char* out, const char* own_src,
                         const std::vector<int>& own_ready, const std::vector<std::vector<std::vector<int>>>* out_busy,
                         uint32_t slot_base);

// Chunks per block for `count` elements with pieces of about chunk_bytes, capped so that one call's slots stay
// well below the 16-bit slot space.
int64_t ring_chunks(int64_t count, size_t elem_size, int64_t chunk_bytes, int n);

}  // namespace detail

}  // namespace dt::ucx
