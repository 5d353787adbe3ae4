#include "placement/layout.h"

#include <algorithm>

#include "core/error.h"

namespace dt {

std::ostream& operator<<(std::ostream& os, const IndexRange& r) { return os << "[" << r.begin << ", " << r.end << ")"; }

IndexRange chunk_range(int64_t n, int64_t k, int64_t i) {
  const int64_t c = ceil_div(n, k);
  // min(j * c, n) without forming j * c when it would pass n (and perhaps overflow, for n near INT64_MAX).
  auto at = [&](int64_t j) { return c == 0 || j > n / c ? n : j * c; };
  return IndexRange{at(i), at(i + 1)};
}

IndexRange balanced_range(int64_t n, int64_t k, int64_t i) {
  DT_CHECK_ARG(n >= 0 && k >= 1 && i >= 0 && i < k, "balanced_range: part ", i, " of ", k, " over ", n);
  const int64_t base = n / k, extra = n % k;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

namespace {

// The recursive chunking of Note [shard order], the one place it is written: the chunks (empty ones included, in
// ascending order) that the coordinates matching `coord` outside the free mesh dims hold of tensor dim d.
std::vector<IndexRange> raw_ranges(int64_t dim_size, int64_t tensor_dim, const MeshShape& mesh,
                                   const ShardingSpec& spec, const std::vector<int64_t>& coord,
                                   const std::vector<bool>& free) {
  std::vector<IndexRange> ranges{IndexRange{0, dim_size}};
  for (int64_t m : spec.splitters(tensor_dim)) {
    const auto mi = static_cast<size_t>(m);
    const int64_t k = mesh.sizes()[mi];
    const bool all = mi < free.size() && free[mi];
    const int64_t lo = all ? 0 : coord[mi];
    const int64_t hi = all ? k : coord[mi] + 1;
    std::vector<IndexRange> next;
    next.reserve(ranges.size() * static_cast<size_t>(hi - lo));
    for (const IndexRange& r : ranges) {
      for (int64_t i = lo; i < hi; ++i) {
        const IndexRange c = chunk_range(r.size(), k, i);
        next.push_back(IndexRange{r.begin + c.begin, r.begin + c.end});
      }
    }
    ranges = std::move(next);
  }
  return ranges;
}

}  // namespace

std::vector<IndexRange> dim_ranges(int64_t dim_size, int64_t tensor_dim, const MeshShape& mesh,
                                   const ShardingSpec& spec, const std::vector<int64_t>& coord,
                                   const std::vector<bool>& free) {
  // Each level refines the previous one in order, so the chunks are ascending: drop empties, merge neighbours.
  std::vector<IndexRange> out;
  for (const IndexRange& r : raw_ranges(dim_size, tensor_dim, mesh, spec, coord, free)) {
    if (r.empty()) continue;
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

void check_layout_args(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec) {
  DT_CHECK_ARG(spec.mesh_ndim() == mesh.ndim(), "spec ", spec, " has ", spec.mesh_ndim(), " placements but the mesh ",
               mesh, " has ", mesh.ndim(), " dims");
  spec.check_tensor_ndim(static_cast<int64_t>(global.size()));
  for (size_t d = 0; d < global.size(); ++d) {
    DT_CHECK_ARG(global[d] >= 0, "global shape ", shape_str(global), " has a negative size in dim ", d);
  }
}

namespace {

void check_coord(const MeshShape& mesh, const std::vector<int64_t>& coord) {
  mesh.linear_index(coord);  // validates length and range
}

}  // namespace

namespace {

// raw_ranges with no free mesh dim: exactly one chunk (an empty one still says where the block would start),
// refined level by level without building lists (this runs per group member on every redistribution step).
IndexRange single_range(int64_t dim_size, int64_t tensor_dim, const MeshShape& mesh, const ShardingSpec& spec,
                        const std::vector<int64_t>& coord) {
  IndexRange r{0, dim_size};
  for (int64_t m : spec.splitters(tensor_dim)) {
    const auto mi = static_cast<size_t>(m);
    const IndexRange c = chunk_range(r.size(), mesh.sizes()[mi], coord[mi]);
    r = IndexRange{r.begin + c.begin, r.begin + c.end};
  }
  return r;
}

}  // namespace

std::vector<IndexRange> local_ranges(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                     const std::vector<int64_t>& coord) {
  check_layout_args(global, mesh, spec);
  check_coord(mesh, coord);
  std::vector<IndexRange> out;
  out.reserve(global.size());
  for (size_t d = 0; d < global.size(); ++d)
    out.push_back(single_range(global[d], static_cast<int64_t>(d), mesh, spec, coord));
  return out;
}

LocalLayout local_layout(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                         const std::vector<int64_t>& coord) {
  check_layout_args(global, mesh, spec);
  check_coord(mesh, coord);
  LocalLayout out;
  out.shape.reserve(global.size());
  out.offset.reserve(global.size());
  for (size_t d = 0; d < global.size(); ++d) {
    const IndexRange r = single_range(global[d], static_cast<int64_t>(d), mesh, spec, coord);
    out.shape.push_back(r.size());
    out.offset.push_back(r.begin);
  }
  return out;
}

LocalLayout local_layout_of_rank(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec, int64_t rank) {
  return local_layout(global, mesh, spec, mesh.coordinate_of(rank));
}

Shape local_shape(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                  const std::vector<int64_t>& coord) {
  check_layout_args(global, mesh, spec);
  check_coord(mesh, coord);
  Shape shape(global.size());
  for (size_t d = 0; d < global.size(); ++d)
    shape[d] = single_range(global[d], static_cast<int64_t>(d), mesh, spec, coord).size();
  return shape;
}

std::vector<int64_t> group_member_sizes(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                        std::vector<int64_t> coord, int64_t mesh_dim, int64_t tensor_dim) {
  check_layout_args(global, mesh, spec);
  check_coord(mesh, coord);
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < mesh.ndim(), "group_member_sizes: mesh dim ", mesh_dim,
               " is out of range for mesh ", mesh);
  DT_CHECK_ARG(tensor_dim >= 0 && tensor_dim < int64_t(global.size()), "group_member_sizes: tensor dim ", tensor_dim,
               " is out of range for shape ", shape_str(global));
  std::vector<int64_t> sizes(size_t(mesh.size(mesh_dim)));
  for (size_t i = 0; i < sizes.size(); ++i) {
    coord[size_t(mesh_dim)] = int64_t(i);
    sizes[i] = single_range(global[size_t(tensor_dim)], tensor_dim, mesh, spec, coord).size();
  }
  return sizes;
}

Shape global_offset(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                    const std::vector<int64_t>& coord) {
  return local_layout(global, mesh, spec, coord).offset;
}

std::vector<std::vector<IndexRange>> group_ranges(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec,
                                                  const std::vector<int64_t>& coord,
                                                  const std::vector<int64_t>& free_mesh_dims) {
  check_layout_args(global, mesh, spec);
  check_coord(mesh, coord);
  std::vector<bool> free(static_cast<size_t>(mesh.ndim()), false);
  for (int64_t m : free_mesh_dims) {
    DT_CHECK_ARG(m >= 0 && m < mesh.ndim(), "group_ranges: mesh dim ", m, " is out of range for mesh ", mesh);
    free[static_cast<size_t>(m)] = true;
  }
  std::vector<std::vector<IndexRange>> out;
  for (size_t d = 0; d < global.size(); ++d) {
    out.push_back(dim_ranges(global[d], static_cast<int64_t>(d), mesh, spec, coord, free));
  }
  return out;
}

Shape max_local_shape(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec) {
  return local_shape(global, mesh, spec, std::vector<int64_t>(static_cast<size_t>(mesh.ndim()), 0));
}

bool is_evenly_sharded(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec) {
  check_layout_args(global, mesh, spec);
  for (size_t d = 0; d < global.size(); ++d) {
    int64_t size = global[d];
    for (int64_t m : spec.splitters(static_cast<int64_t>(d))) {
      const int64_t k = mesh.sizes()[static_cast<size_t>(m)];
      if (size % k != 0) return false;
      size /= k;
    }
  }
  return true;
}

}  // namespace dt
