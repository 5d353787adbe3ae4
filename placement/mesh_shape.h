// MeshShape: the pure shape of a device mesh (no communicators): sizes, optional dim names and the global ranks at
// each coordinate, listed row-major (the last mesh dim varies fastest).
//
//   MeshShape mesh({2, 4}, {"dp", "tp"});       // ranks 0..7: rank 5 is at coordinate [1, 1]
//   mesh.ranks_along(1, {1, 0})                  // the "tp" group through [1, 0]: ranks 4, 5, 6, 7
//   mesh.sub_mesh({"tp"}, {1, 0})                // that group as a 1-d mesh named "tp"
//   mesh.flatten(0, 1)                           // a 1-d mesh of 8 named "dp_tp"
//
// A sub-mesh keeps the global ranks of its parent, so the rank list may be any list of distinct non-negative ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

class MeshShape {
 public:
  // At most this many ranks (2^24): the rank list is held in full, so the limit keeps it to 128 MiB.
  static constexpr int64_t kMaxRanks = int64_t{1} << 24;

  // Validates: at least one dim, every size positive, at most kMaxRanks ranks, names empty or one distinct non-empty
  // name per dim, ranks empty (meaning 0..n-1) or n distinct non-negative ranks. Throws InvalidArgument naming the bad
  // value.
  explicit MeshShape(std::vector<int64_t> sizes, std::vector<std::string> names = {}, std::vector<int64_t> ranks = {});

  int64_t ndim() const { return static_cast<int64_t>(sizes_.size()); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t size(int64_t mesh_dim) const;  // throws InvalidArgument when mesh_dim is out of range
  int64_t size(std::string_view name) const { return size(dim_index(name)); }
  int64_t numel() const { return static_cast<int64_t>(ranks_.size()); }  // number of ranks

  bool has_names() const { return !names_.empty(); }
  const std::vector<std::string>& names() const { return names_; }  // empty when unnamed
  // The dim called `name`; throws InvalidArgument naming it and the known names when there is none.
  int64_t dim_index(std::string_view name) const;
  // "dp" for a named dim, "1" otherwise (for messages).
  std::string dim_label(int64_t mesh_dim) const;

  const std::vector<int64_t>& ranks() const { return ranks_; }
  bool contains(int64_t rank) const;
  // Row-major coordinate of a global rank; throws InvalidArgument when the rank is not in this mesh.
  std::vector<int64_t> coordinate_of(int64_t rank) const;
  // Global rank at a coordinate; throws InvalidArgument when the coordinate has the wrong length or is out of range.
  int64_t rank_at(const std::vector<int64_t>& coord) const;
  // Row-major linear index of a coordinate (the position in ranks()).
  int64_t linear_index(const std::vector<int64_t>& coord) const;
  std::vector<int64_t> coordinate_at_index(int64_t linear_index) const;

  // The 1-d group through `coord` along `mesh_dim`: the ranks at coord with coord[mesh_dim] = 0, 1, ..., in order.
  std::vector<int64_t> ranks_along(int64_t mesh_dim, const std::vector<int64_t>& coord) const;

  // The sub-mesh spanned by the given dims (in the order given) through `coord`: the other dims are fixed at coord's
  // values, the listed dims' values in coord are ignored. Names and global ranks are kept.
  MeshShape sub_mesh(const std::vector<int64_t>& mesh_dims, const std::vector<int64_t>& coord) const;
  MeshShape sub_mesh(const std::vector<std::string>& dim_names, const std::vector<int64_t>& coord) const;
  // Same, through the coordinate of a global rank of this mesh.
  MeshShape sub_mesh_of_rank(const std::vector<std::string>& dim_names, int64_t rank) const;

  // Merges the contiguous dims [first, last] into one (row-major, so the rank list is unchanged). The new dim is
  // called `name`, or the merged names joined with '_' when empty; an unnamed mesh stays unnamed (naming the new
  // dim of an unnamed mesh is an error, since names are given for every dim or for none).
  MeshShape flatten(int64_t first, int64_t last, std::string name = "") const;
  // Same, by names: they must be contiguous and in mesh order.
  MeshShape flatten(const std::vector<std::string>& dim_names, std::string name = "") const;

  bool operator==(const MeshShape& other) const = default;
  std::string to_string() const;  // "mesh[2, 4](dp, tp)" plus " ranks [..]" when not 0..n-1

 private:
  void check_coordinate(const std::vector<int64_t>& coord) const;
  int64_t check_dim(int64_t mesh_dim) const;

  std::vector<int64_t> sizes_;
  std::vector<std::string> names_;
  std::vector<int64_t> ranks_;
  bool default_ranks_ = true;  // ranks_ == 0..n-1
};

std::ostream& operator<<(std::ostream& os, const MeshShape& mesh);

}  // namespace dt

template <>
struct std::hash<dt::MeshShape> {
  size_t operator()(const dt::MeshShape& mesh) const noexcept;
};
