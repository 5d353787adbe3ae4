// The pure queries: placements as text, layouts and plans (placement/ only: no world, no communication).
#include "bindings/c_api/funnel.h"
#include "core/error.h"
#include "placement/layout.h"
#include "placement/planner.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {
constexpr int64_t kMaxDims = 64;
}  // namespace

extern "C" {

dt_status_t dt_placements_parse(const char* text, int32_t tensor_ndim, dt_placement_t* out, int32_t cap, int32_t* n) {
  return call("dt_placements_parse", [&] {
    require(text, "text");
    require(n, "n");
    DT_CHECK_ARG(tensor_ndim >= -1 && tensor_ndim <= kMaxDims, "tensor_ndim ", tensor_ndim, " (-1 or 0..64)");
    const ShardingSpec spec =
        ShardingSpec::parse(text, tensor_ndim < 0 ? std::nullopt : std::optional<int64_t>(tensor_ndim));
    const std::vector<dt_placement_t> ps = from_spec(spec);
    require_array(out, int64_t(ps.size()), cap, "out (room for the placements)");
    std::copy(ps.begin(), ps.end(), out);
    *n = int32_t(ps.size());
  });
}

dt_status_t dt_placements_format(const dt_placement_t* placements, int32_t n, char* buf, size_t cap, size_t* needed) {
  return call("dt_placements_format", [&] {
    int64_t ndim = 0;
    require_array(placements, n, 16, "placements");
    for (int32_t i = 0; i < n; ++i)
      if (placements[i].kind == DT_SHARD) ndim = std::max<int64_t>(ndim, placements[i].dim + 1);
    copy_out(to_spec(placements, n, n, ndim).to_string(), buf, cap, needed);
  });
}

dt_status_t dt_layout_block(const int64_t* shape, int32_t ndim, const int64_t* mesh_sizes, int32_t mesh_ndim,
                            const dt_placement_t* placements, const int64_t* coord, int64_t* local_shape,
                            int64_t* offset) {
  return call("dt_layout_block", [&] {
    require_array(shape, ndim, kMaxDims, "shape");
    require_array(mesh_sizes, mesh_ndim, 16, "mesh_sizes");
    require_array(coord, mesh_ndim, 16, "coord");
    const MeshShape mesh(std::vector<int64_t>(mesh_sizes, mesh_sizes + mesh_ndim));
    const ShardingSpec spec = to_spec(placements, mesh_ndim, mesh_ndim, ndim);
    const LocalLayout l =
        local_layout(Shape(shape, shape + ndim), mesh, spec, std::vector<int64_t>(coord, coord + mesh_ndim));
    copy_ints(l.shape, local_shape, ndim, "local_shape");
    copy_ints(l.offset, offset, ndim, "offset");
  });
}

dt_status_t dt_plan_describe(const int64_t* shape, int32_t ndim, const int64_t* mesh_sizes, int32_t mesh_ndim,
                             const dt_placement_t* from, const dt_placement_t* to, int32_t dtype, char* buf, size_t cap,
                             size_t* needed) {
  return call("dt_plan_describe", [&] {
    require_array(shape, ndim, kMaxDims, "shape");
    require_array(mesh_sizes, mesh_ndim, 16, "mesh_sizes");
    const MeshShape mesh(std::vector<int64_t>(mesh_sizes, mesh_sizes + mesh_ndim));
    const ShardingSpec a = to_spec(from, mesh_ndim, mesh_ndim, ndim), b = to_spec(to, mesh_ndim, mesh_ndim, ndim);
    const Shape global(shape, shape + ndim);
    check_layout_args(global, mesh, a);
    check_layout_args(global, mesh, b);
    copy_out(plan_redistribution_uncached(mesh, global, dtype_size(to_dtype(dtype)), a, b).to_string(), buf, cap,
             needed);
  });
}

}  // extern "C"
