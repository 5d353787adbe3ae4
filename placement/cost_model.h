// The alpha-beta cost model the redistribution planner minimises. All constants live here.
//
//   cost(step) = launch + alpha * latency_terms(kind, n) + beta * bytes moved per rank + copy_beta * bytes copied
//
// Ring formulas for a group of n ranks (bytes moved per rank, by the largest rank, with the padding the collectives
// send for uneven shards, i.e. (n-1)/n of the larger side padded to n equal chunks):
//   all_gather      n-1 latency terms, (n-1) * input chunk
//   reduce_scatter  n-1 latency terms, (n-1) * output chunk
//   all_reduce      2(n-1) latency terms, 2(n-1) * ceil(numel / n) elements
//   all_to_all      n-1 latency terms, (n-1) * one block (the input sliced by n along the new shard dim)
//   local_slice / local_partial: no latency term, nothing moved, a local copy of the output (local_partial with avg,
//   max or min copies nothing: every coordinate keeps the value).
// `launch` is paid by every step (also on a mesh dim of size 1), so that among equally priced plans the shorter wins.
#pragma once

#include <cstdint>
#include <string>

namespace dt {

enum class StepKind : uint8_t { kAllGather, kAllReduce, kReduceScatter, kLocalSlice, kAllToAll, kLocalPartial };

const char* step_kind_name(StepKind kind);  // "all_gather", "all_reduce", ...
bool is_collective(StepKind kind);          // false for local_slice and local_partial

struct CostModel {
  double alpha = 10e-6;            // seconds per latency term (one message on the ring's critical path)
  double beta = 1.0 / 10e9;        // seconds per byte sent by a rank (10 GB/s links)
  double launch = 1e-6;            // fixed seconds per step (kernel / collective launch)
  double copy_beta = 1.0 / 100e9;  // seconds per byte copied locally (memory bandwidth, read + write)

  static int64_t latency_terms(StepKind kind, int64_t group_size);
  double cost(StepKind kind, int64_t group_size, int64_t bytes_moved, int64_t bytes_copied) const;

  bool operator==(const CostModel&) const = default;
};

}  // namespace dt
