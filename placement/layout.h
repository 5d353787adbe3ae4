// Layout math: which part of the global tensor each mesh coordinate holds. This is the single source of truth for
// local shapes and offsets; every other layer calls these functions.
//
// Uneven sizes follow torch.chunk: n elements over k chunks use the chunk size c = ceil(n / k); chunk i covers
// [min(i*c, n), min((i+1)*c, n)), so trailing chunks may be short or empty (n=5, k=4: sizes 2, 2, 1, 0).
// Nested sharding (see Note [shard order] in sharding_spec.h) applies the rule recursively: the outermost splitter
// chunks the whole dim, each further splitter chunks its parent's chunk. A rank's own block is therefore one
// contiguous range per dim, but the ranges that a group of ranks holds together need not be (group_ranges).
// Replicate and Partial leave every dim whole.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "core/shape.h"
#include "placement/mesh_shape.h"
#include "placement/sharding_spec.h"

namespace dt {

struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const IndexRange&) const = default;
};
std::ostream& operator<<(std::ostream& os, const IndexRange& r);  // "[2, 4)"

// The torch.chunk rule: the range of chunk i (0 <= i < k) when [0, n) is split into k chunks.
IndexRange chunk_range(int64_t n, int64_t k, int64_t i);
// The balanced split: sizes differ by at most one, the first n % k parts one larger, none empty while n >= k
// (pipeline stages' blocks, microbatches' rows; torch.chunk would leave trailing parts empty).
IndexRange balanced_range(int64_t n, int64_t k, int64_t i);

// The ranges of tensor dim d held together by the coordinates that agree with `coord` except on the mesh dims
// flagged in `free` (those take all their values). Sorted, disjoint, adjacent ranges merged, empty ones dropped (so
// an empty holding is an empty list); `free` may be empty (no free mesh dim). This and local_ranges share the one
// recursive chunking (layout.cc) that every other function calls. Inputs are trusted: callers validate (the public
// functions below do).
std::vector<IndexRange> dim_ranges(int64_t dim_size, int64_t tensor_dim, const MeshShape& mesh,
                                   const ShardingSpec& spec, const std::vector<int64_t>& coord,
                                   const std::vector<bool>& free);

// Throws InvalidArgument unless the spec has one placement per mesh dim, fits the tensor's ndim and the global shape
// has no negative size. Every function below calls it.
void check_layout_args(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec);

struct LocalLayout {
  Shape shape;   // local shape
  Shape offset;  // global index of the local element [0, 0, ...] (for empty dims: where the block would start)
  int64_t numel() const { return shape_numel(shape); }
  bool operator==(const LocalLayout&) const = default;
};

// The block held at a mesh coordinate (a contiguous box of the global tensor).
LocalLayout local_layout(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                         const std::vector<int64_t>& coord);
LocalLayout local_layout_of_rank(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec, int64_t rank);
Shape local_shape(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                  const std::vector<int64_t>& coord);
// The sizes along `tensor_dim` of the blocks of the group along `mesh_dim` through `coord`: entry i is what
// local_shape(...)[tensor_dim] is at coord with coord[mesh_dim] = i (one validation, no shape per member: this runs
// on every redistribution step).
std::vector<int64_t> group_member_sizes(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                        std::vector<int64_t> coord, int64_t mesh_dim, int64_t tensor_dim);
Shape global_offset(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                    const std::vector<int64_t>& coord);
// The per-dim ranges of the block at coord (one range per dim, possibly empty).
std::vector<IndexRange> local_ranges(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                     const std::vector<int64_t>& coord);

// For every tensor dim, the ranges held together by the group of coordinates that agree with coord except on
// free_mesh_dims (e.g. {m}: the 1-d group along m through coord). Non-contiguous when a free mesh dim is not the
// innermost splitter of its tensor dim. The held region is the product of the per-dim lists.
std::vector<std::vector<IndexRange>> group_ranges(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                                  const std::vector<int64_t>& coord,
                                                  const std::vector<int64_t>& free_mesh_dims);

// The largest local block over all coordinates (the block at coordinate 0, since chunk 0 is never smaller than the
// others at any nesting level): the size that collectives pad to.
Shape max_local_shape(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec);

// Whether every coordinate holds a block of the same shape (no padding needed).
bool is_evenly_sharded(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec);

}  // namespace dt
