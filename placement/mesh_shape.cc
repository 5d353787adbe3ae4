#include "placement/mesh_shape.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "core/error.h"
#include "core/shape.h"
#include "placement/placement.h"

namespace dt {

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

}  // namespace

MeshShape::MeshShape(std::vector<int64_t> sizes, std::vector<std::string> names, std::vector<int64_t> ranks)
    : sizes_(std::move(sizes)), names_(std::move(names)), ranks_(std::move(ranks)) {
  DT_CHECK_ARG(!sizes_.empty(), "a mesh needs at least one dim, got sizes []");
  int64_t n = 1;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    DT_CHECK_ARG(sizes_[i] > 0, "mesh dim ", i, " has size ", sizes_[i], ": mesh sizes must be positive (sizes ",
                 shape_str(sizes_), ")");
    DT_CHECK_ARG(n <= kMaxRanks / sizes_[i], "mesh sizes ", shape_str(sizes_), " have more than ", kMaxRanks,
                 " ranks (the most a mesh supports)");
    n *= sizes_[i];
  }
  if (!names_.empty()) {
    DT_CHECK_ARG(names_.size() == sizes_.size(), "mesh has ", sizes_.size(), " dims but ", names_.size(),
                 " names were given (", join_names(names_), ")");
    std::unordered_set<std::string> seen;
    for (const std::string& name : names_) {
      DT_CHECK_ARG(!name.empty(), "mesh dim names must be non-empty (names: ", join_names(names_), ")");
      DT_CHECK_ARG(seen.insert(name).second, "duplicate mesh dim name '", name, "' (names: ", join_names(names_), ")");
    }
  }
  if (ranks_.empty()) {
    ranks_.resize(static_cast<size_t>(n));
    std::iota(ranks_.begin(), ranks_.end(), int64_t{0});
  } else {
    DT_CHECK_ARG(static_cast<int64_t>(ranks_.size()) == n, "mesh of sizes ", shape_str(sizes_), " has ", n,
                 " ranks but a rank list of length ", ranks_.size(), " was given");
    std::unordered_set<int64_t> seen;
    for (int64_t r : ranks_) {
      DT_CHECK_ARG(r >= 0, "mesh ranks must be non-negative, got rank ", r);
      DT_CHECK_ARG(seen.insert(r).second, "duplicate rank ", r, " in the mesh rank list ", shape_str(ranks_));
    }
    for (size_t i = 0; i < ranks_.size() && default_ranks_; ++i) default_ranks_ = ranks_[i] == static_cast<int64_t>(i);
  }
}

int64_t MeshShape::check_dim(int64_t mesh_dim) const {
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < ndim(), "mesh dim ", mesh_dim, " is out of range for a mesh with ", ndim(),
               " dims");
  return mesh_dim;
}

int64_t MeshShape::size(int64_t mesh_dim) const { return sizes_[static_cast<size_t>(check_dim(mesh_dim))]; }

int64_t MeshShape::dim_index(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int64_t>(i);
  }
  DT_THROW(InvalidArgument, "unknown mesh dim name '", name,
           "' (mesh dims: ", names_.empty() ? std::string("unnamed") : join_names(names_), ")");
}

std::string MeshShape::dim_label(int64_t mesh_dim) const {
  check_dim(mesh_dim);
  return names_.empty() ? std::to_string(mesh_dim) : names_[static_cast<size_t>(mesh_dim)];
}

bool MeshShape::contains(int64_t rank) const {
  if (default_ranks_) return rank >= 0 && rank < numel();
  return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end();
}

void MeshShape::check_coordinate(const std::vector<int64_t>& coord) const {
  DT_CHECK_ARG(static_cast<int64_t>(coord.size()) == ndim(), "coordinate ", shape_str(coord), " has ", coord.size(),
               " entries but the mesh ", to_string(), " has ", ndim(), " dims");
  for (size_t i = 0; i < coord.size(); ++i) {
    DT_CHECK_ARG(coord[i] >= 0 && coord[i] < sizes_[i], "coordinate ", shape_str(coord), " is out of range for mesh ",
                 to_string(), " (mesh dim ", i, " has size ", sizes_[i], ")");
  }
}

int64_t MeshShape::linear_index(const std::vector<int64_t>& coord) const {
  check_coordinate(coord);
  int64_t idx = 0;
  for (size_t i = 0; i < coord.size(); ++i) idx = idx * sizes_[i] + coord[i];
  return idx;
}

std::vector<int64_t> MeshShape::coordinate_at_index(int64_t linear_index) const {
  DT_CHECK_ARG(linear_index >= 0 && linear_index < numel(), "linear index ", linear_index,
               " is out of range for a mesh of ", numel(), " ranks");
  std::vector<int64_t> coord(sizes_.size());
  for (size_t i = sizes_.size(); i-- > 0;) {
    coord[i] = linear_index % sizes_[i];
    linear_index /= sizes_[i];
  }
  return coord;
}

std::vector<int64_t> MeshShape::coordinate_of(int64_t rank) const {
  if (default_ranks_) {
    DT_CHECK_ARG(rank >= 0 && rank < numel(), "rank ", rank, " is not in mesh ", to_string());
    return coordinate_at_index(rank);
  }
  const auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  DT_CHECK_ARG(it != ranks_.end(), "rank ", rank, " is not in mesh ", to_string());
  return coordinate_at_index(it - ranks_.begin());
}

int64_t MeshShape::rank_at(const std::vector<int64_t>& coord) const {
  return ranks_[static_cast<size_t>(linear_index(coord))];
}

std::vector<int64_t> MeshShape::ranks_along(int64_t mesh_dim, const std::vector<int64_t>& coord) const {
  check_dim(mesh_dim);
  check_coordinate(coord);
  std::vector<int64_t> c = coord;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < sizes_[static_cast<size_t>(mesh_dim)]; ++i) {
    c[static_cast<size_t>(mesh_dim)] = i;
    out.push_back(rank_at(c));
  }
  return out;
}

MeshShape MeshShape::sub_mesh(const std::vector<int64_t>& mesh_dims, const std::vector<int64_t>& coord) const {
  DT_CHECK_ARG(!mesh_dims.empty(), "a sub-mesh needs at least one mesh dim");
  check_coordinate(coord);
  std::vector<bool> used(sizes_.size(), false);
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  for (int64_t d : mesh_dims) {
    check_dim(d);
    DT_CHECK_ARG(!used[static_cast<size_t>(d)], "mesh dim ", dim_label(d), " is listed twice for a sub-mesh");
    used[static_cast<size_t>(d)] = true;
    sizes.push_back(sizes_[static_cast<size_t>(d)]);
    if (has_names()) names.push_back(names_[static_cast<size_t>(d)]);
  }
  MeshShape shape_only(sizes);
  std::vector<int64_t> ranks;
  std::vector<int64_t> c = coord;
  for (int64_t i = 0; i < shape_only.numel(); ++i) {
    const std::vector<int64_t> sub = shape_only.coordinate_at_index(i);
    for (size_t k = 0; k < mesh_dims.size(); ++k) c[static_cast<size_t>(mesh_dims[k])] = sub[k];
    ranks.push_back(rank_at(c));
  }
  return MeshShape(std::move(sizes), std::move(names), std::move(ranks));
}

MeshShape MeshShape::sub_mesh(const std::vector<std::string>& dim_names, const std::vector<int64_t>& coord) const {
  std::vector<int64_t> dims;
  for (const std::string& name : dim_names) dims.push_back(dim_index(name));
  return sub_mesh(dims, coord);
}

MeshShape MeshShape::sub_mesh_of_rank(const std::vector<std::string>& dim_names, int64_t rank) const {
  return sub_mesh(dim_names, coordinate_of(rank));
}

MeshShape MeshShape::flatten(int64_t first, int64_t last, std::string name) const {
  check_dim(first);
  check_dim(last);
  DT_CHECK_ARG(first <= last, "cannot flatten mesh dims ", first, "..", last, ": the first must not exceed the last");
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  for (int64_t d = 0; d < ndim(); ++d) {
    const auto i = static_cast<size_t>(d);
    if (d <= first || d > last) {
      sizes.push_back(sizes_[i]);
      if (has_names()) names.push_back(names_[i]);
    } else {
      sizes.back() *= sizes_[i];
      if (has_names()) names.back() += "_" + names_[i];
    }
  }
  if (!name.empty()) {
    DT_CHECK_ARG(has_names(), "cannot name the flattened dim '", name, "' of an unnamed mesh ", to_string(),
                 ": names are given for every dim or for none");
    names[static_cast<size_t>(first)] = std::move(name);
  }
  return MeshShape(std::move(sizes), std::move(names), ranks_);
}

MeshShape MeshShape::flatten(const std::vector<std::string>& dim_names, std::string name) const {
  DT_CHECK_ARG(!dim_names.empty(), "flatten needs at least one mesh dim name");
  const int64_t first = dim_index(dim_names.front());
  for (size_t k = 1; k < dim_names.size(); ++k) {
    DT_CHECK_ARG(dim_index(dim_names[k]) == first + static_cast<int64_t>(k), "cannot flatten mesh dims (",
                 join_names(dim_names), "): they must be contiguous and in mesh order (mesh dims: ", join_names(names_),
                 ")");
  }
  return flatten(first, first + static_cast<int64_t>(dim_names.size()) - 1, std::move(name));
}

std::string MeshShape::to_string() const {
  std::string out = "mesh" + shape_str(sizes_);
  if (has_names()) out += "(" + join_names(names_) + ")";
  if (!default_ranks_) out += " ranks " + shape_str(ranks_);
  return out;
}

std::ostream& operator<<(std::ostream& os, const MeshShape& mesh) { return os << mesh.to_string(); }

}  // namespace dt

size_t std::hash<dt::MeshShape>::operator()(const dt::MeshShape& mesh) const noexcept {
  size_t h = 0x4d455348;
  for (int64_t s : mesh.sizes()) h = dt::hash_mix(h, std::hash<int64_t>()(s));
  for (const std::string& n : mesh.names()) h = dt::hash_mix(h, std::hash<std::string>()(n));
  for (int64_t r : mesh.ranks()) h = dt::hash_mix(h, std::hash<int64_t>()(r));
  return h;
}
