// Placements: how a tensor is laid out along one mesh dim.
//
//   Shard{d}     the tensor is split along tensor dim d across the mesh dim (torch.chunk rule, see layout.h)
//   Replicate{}  every coordinate of the mesh dim holds the same value
//   Partial{op}  every coordinate holds a contribution; the value is their reduction with op (sum, avg, max, min,
//                product)
//
// Text form (printing and parsing): `S(0)`, `R`, `P(sum)`. A list is comma separated: `S(0),R,P(max)`. The parser
// also accepts the long names `Shard(0)`, `Replicate`, `Replicate()`, `Partial(avg)`, a bare `P`/`Partial` meaning
// `P(sum)`, and spaces anywhere between tokens. See sharding_spec.h for the `[k]` shard-order suffix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/reduce_op.h"

namespace dt {

struct Shard {
  int64_t dim = 0;
  bool operator==(const Shard&) const = default;
};

struct Replicate {
  bool operator==(const Replicate&) const = default;
};

struct Partial {
  ReduceOp op = ReduceOp::kSum;
  bool operator==(const Partial&) const = default;
};

using Placement = std::variant<Shard, Replicate, Partial>;

inline bool is_shard(const Placement& p) { return std::holds_alternative<Shard>(p); }
inline bool is_shard(const Placement& p, int64_t dim) {
  return std::holds_alternative<Shard>(p) && std::get<Shard>(p).dim == dim;
}
inline bool is_replicate(const Placement& p) { return std::holds_alternative<Replicate>(p); }
inline bool is_partial(const Placement& p) { return std::holds_alternative<Partial>(p); }

std::string to_string(const Placement& p);                  // "S(0)", "R", "P(sum)"
std::string to_string(const std::vector<Placement>& list);  // "S(0),R"
std::ostream& operator<<(std::ostream& os, const Placement& p);

// Parses one placement; throws InvalidArgument quoting the text when it is not one.
Placement parse_placement(std::string_view text);
// Parses a comma-separated list (at least one entry); throws InvalidArgument naming the bad entry.
std::vector<Placement> parse_placements(std::string_view text);

// Maps negative Shard dims into [0, ndim) and checks every Shard dim is in range; throws InvalidArgument naming the
// mesh dim and the bad dim otherwise.
std::vector<Placement> normalize_placements(std::vector<Placement> placements, int64_t tensor_ndim);

size_t hash_placements(const std::vector<Placement>& placements);

// Mixes `v` into the running hash `seed` (boost::hash_combine's recipe, 64-bit constant).
inline size_t hash_mix(size_t seed, size_t v) { return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)); }

}  // namespace dt

template <>
struct std::hash<dt::Shard> {
  size_t operator()(const dt::Shard& s) const noexcept { return std::hash<int64_t>()(s.dim); }
};
template <>
struct std::hash<dt::Replicate> {
  size_t operator()(const dt::Replicate&) const noexcept { return 0x52; }
};
template <>
struct std::hash<dt::Partial> {
  size_t operator()(const dt::Partial& p) const noexcept { return 0x50 + static_cast<size_t>(p.op); }
};
// std::hash<dt::Placement> comes from the standard std::hash<std::variant<...>>.
