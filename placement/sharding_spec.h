// ShardingSpec: one placement per mesh dim plus the shard order, i.e. for each sharded tensor dim the ordered list of
// mesh dims that split it.
//
// Note [shard order]
// Tensor dim d sharded by mesh dims [m1, m2] (in that order) means: split d into chunks over m1 (torch.chunk rule),
// then split each such chunk over m2. m1 is the outermost splitter, m2 the innermost. The default order is ascending
// mesh dims, which is what plain `Shard(d)` on several mesh dims means in PyTorch. The other orders are what PyTorch
// calls `_StridedShard`: FSDP over "dp" (mesh dim 0) on top of TP over "tp" (mesh dim 1) that already sharded the
// parameter's dim 0 gives the order [1, 0] (split by tp first, then each tp shard by dp).
//
// Text form: the placements, comma separated (`S(0),R`). When a tensor dim's order is not the default, every Shard of
// that dim carries its position in the order as a suffix `[k]` (k = 0 is the outermost, first splitter):
//   S(0)[1],S(0)[0]   mesh dim 1 splits tensor dim 0 first, mesh dim 0 splits each of those chunks: order [1, 0]
//   S(0)[0],S(0)[1]   the same as S(0),S(0) (default order), printed without suffixes
// When parsing, the suffixes of one tensor dim must be all present or all absent, and form 0..k-1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/reduce_op.h"
#include "placement/placement.h"

namespace dt {

// tensor dim -> mesh dims splitting it, outermost first. Only sharded tensor dims have an entry.
using ShardOrder = std::map<int64_t, std::vector<int64_t>>;

// Maps negative tensor dims among the keys into [0, ndim), as normalize_placements does for Shard dims; throws
// InvalidArgument for a dim out of range or listed twice (once negative, once not).
ShardOrder normalize_shard_order(const ShardOrder& order, int64_t tensor_ndim);

class ShardingSpec {
 public:
  ShardingSpec() = default;  // no mesh dims; only useful as a placeholder
  // Default (ascending) shard order. Negative Shard dims are rejected: normalize them first (normalize_placements or
  // parse with a tensor ndim).
  explicit ShardingSpec(std::vector<Placement> placements);
  // Explicit shard order; tensor dims missing from `order` get the default. Throws InvalidArgument when an entry
  // does not list exactly the mesh dims that shard that tensor dim, each once.
  ShardingSpec(std::vector<Placement> placements, const ShardOrder& order);

  static ShardingSpec replicated(int64_t mesh_ndim);
  // Parses the text form above. With tensor_ndim, negative Shard dims are wrapped and every dim is range-checked.
  static ShardingSpec parse(std::string_view text, std::optional<int64_t> tensor_ndim = std::nullopt);

  int64_t mesh_ndim() const { return static_cast<int64_t>(placements_.size()); }
  const std::vector<Placement>& placements() const { return placements_; }
  const Placement& placement(int64_t mesh_dim) const;
  const Placement& operator[](int64_t mesh_dim) const { return placement(mesh_dim); }

  const ShardOrder& shard_order() const { return order_; }
  // Mesh dims splitting tensor dim d, outermost first (empty when d is not sharded).
  const std::vector<int64_t>& splitters(int64_t tensor_dim) const;
  // Whether mesh_dim is a Shard and the innermost (last) splitter of its tensor dim.
  bool is_innermost(int64_t mesh_dim) const;
  bool has_default_order() const;

  bool is_replicated() const;  // every mesh dim is R
  bool has_partial() const;
  // The op of every Partial, if they all agree (nullopt without Partial). Throws Unsupported for mixed ops.
  std::optional<ReduceOp> partial_op() const;
  bool has_mixed_partial() const;
  // The largest Shard dim + 1 (0 without Shard): the least tensor ndim this spec fits.
  int64_t min_tensor_ndim() const;
  // Throws InvalidArgument when a Shard dim is not below tensor_ndim, naming the spec and the dim.
  void check_tensor_ndim(int64_t tensor_ndim) const;

  // The spec with mesh_dim's placement replaced; a new Shard(d) becomes the innermost splitter of d, and the mesh dim
  // leaves its old tensor dim's order (the others keep their relative order).
  ShardingSpec with_placement(int64_t mesh_dim, const Placement& p) const;

  bool operator==(const ShardingSpec& other) const = default;
  std::string to_string() const;

 private:
  void build_order(const ShardOrder* order);

  std::vector<Placement> placements_;
  ShardOrder order_;
};

std::ostream& operator<<(std::ostream& os, const ShardingSpec& spec);

}  // namespace dt

template <>
struct std::hash<dt::ShardingSpec> {
  size_t operator()(const dt::ShardingSpec& spec) const noexcept;
};
