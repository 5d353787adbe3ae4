// Boxes of a global tensor (a block: offset and shape per dim) and the contiguous runs in which one box's part is
// copied between two row-major blocks: the index math of checkpoint reads and writes (no I/O here).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace dt::checkpoint {

struct Box {
  Shape offset;  // global index of the first element
  Shape shape;
  int64_t numel() const { return shape_numel(shape); }
  bool operator==(const Box&) const = default;
};

// The common part of two boxes of the same rank, or nullopt when they share no element. A 0-d box is one element.
std::optional<Box> intersect(const Box& a, const Box& b);

// The first pair (i < j) of boxes that share an element, or nullopt when they are pairwise disjoint. A sweep along
// dim 0 (boxes sorted by their first row, compared only with those whose rows are still open), so the boxes of a
// layout (bands of rows, grids) cost about n log n, not n^2; boxes of one rank for 0-d tensors always overlap.
std::optional<std::pair<size_t, size_t>> first_overlap(const std::vector<Box>& boxes);

// For the elements of `part` (inside both `src` and `dst`), the contiguous runs: fn(src element offset, dst element
// offset, length), offsets within the row-major blocks src and dst, in increasing src order. Trailing dims that
// all three cover whole are merged into one run.
void for_each_run(const Box& part, const Box& src, const Box& dst,
                  const std::function<void(int64_t src_elem, int64_t dst_elem, int64_t len)>& fn);

}  // namespace dt::checkpoint
