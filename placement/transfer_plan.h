// Point-to-point transfer plans (pure): which rank sends which index box to which rank so that every rank of a
// target layout receives exactly its block from the ranks of a source layout. Cross-mesh redistribution runs them
// between two meshes of one world; distribute_tensor from a source rank runs them from a one-rank "mesh" holding the
// whole tensor (a scatter: each rank receives only its own block).
//
// Note [cross-mesh plan]
// Partial source dims are first reduced inside the source mesh (P -> R), and Partial target dims are produced at
// the end by the exact local rule (R -> P), so the transfer itself moves plain blocks between the specs without
// Partial (without_partial). The distinct source blocks tile the global tensor; for each (target rank t, source
// block S) with a non-empty overlap, one holder of S sends the overlap to t: t itself when it holds S (a local
// copy), else holder number (t's index in the target mesh) modulo the number of holders, which spreads the load over
// replicas. Every rank derives the same list from the layout math alone, so the messages between two ranks are
// matched by their order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "placement/layout.h"
#include "placement/mesh_shape.h"
#include "placement/sharding_spec.h"

namespace dt {

using Box = std::vector<IndexRange>;  // one range per tensor dim

struct BlockTransfer {
  int64_t sender = 0;    // global rank
  int64_t receiver = 0;  // global rank (== sender: a local copy)
  Box src_box;           // the sender's block
  Box dst_box;           // the receiver's block
  Box region;            // the overlap moved (inside both boxes)
};

struct TransferPlan {
  std::vector<BlockTransfer> transfers;  // in the order every rank posts them
  // Indices into `transfers` of those a global rank takes part in, in order (empty for ranks in neither mesh).
  const std::vector<int32_t>& involving(int64_t rank) const;
  std::vector<std::vector<int32_t>> by_rank;  // indexed by global rank
};

// The spec with every Partial mesh dim replaced by Replicate (what a transfer moves; Note [cross-mesh plan]).
ShardingSpec without_partial(const ShardingSpec& spec);

// The transfers taking (src_mesh, src) to (dst_mesh, dst) for a tensor of shape `global`. Neither spec may hold a
// Partial placement (InvalidArgument otherwise); both are validated against the tensor like the layout functions.
TransferPlan plan_transfers_uncached(const MeshShape& src_mesh, const ShardingSpec& src, const MeshShape& dst_mesh,
                                     const ShardingSpec& dst, const Shape& global);
// The same through a process-wide thread-safe cache keyed by (both meshes with their ranks, both specs, shape).
// The reference stays valid for the life of the process.
const TransferPlan& plan_transfers(const MeshShape& src_mesh, const ShardingSpec& src, const MeshShape& dst_mesh,
                                   const ShardingSpec& dst, const Shape& global);

}  // namespace dt
