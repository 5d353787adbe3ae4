// The layout of an FSDP parameter group (fsdp/layout.h).
#include "fsdp/layout.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

namespace dt::fsdp {

namespace {

// Regions start 16 bytes apart at least, so that every typed view of a flat buffer is aligned for its dtype.
constexpr int64_t kAlign = 16;

int64_t round_up(int64_t n, int64_t m) { return m <= 1 ? n : (n + m - 1) / m * m; }

// The shard's mesh and spec: Shard(0) on the FSDP shard dim (innermost: it splits what tensor parallelism left on
// this rank), Replicate on the HSDP replicate dim, the parameter's own placements on its mesh's dims.
void place_shard(ParamLayout& p, const DeviceMesh& param_mesh, const ShardingSpec& param_spec, const DeviceMesh& mesh) {
  const int64_t shard_dim = mesh.ndim() - 1;
  if (param_mesh == mesh) {
    DT_CHECK_ARG(param_spec.is_replicated(), "fully_shard: parameter ", p.name, " is already laid out as ",
                 param_spec.to_string(), " on the FSDP mesh ", mesh.to_string(),
                 "; FSDP shards replicated parameters (shard a module once)");
    std::vector<Placement> pl(size_t(mesh.ndim()), Replicate{});
    pl[size_t(shard_dim)] = Shard{0};
    p.shard_mesh = mesh;
    p.shard_spec = ShardingSpec(pl);
    return;
  }
  const DeviceMesh root = mesh.root();
  DT_CHECK_ARG(param_mesh.root() == root, "fully_shard: parameter ", p.name, " lives on ", param_mesh.to_string(),
               ", which does not come from the same mesh as the FSDP mesh ", mesh.to_string(),
               " (take both from one DeviceMesh, e.g. mesh[\"tp\"] and mesh[\"dp\"])");
  const std::vector<int64_t> fsdp_dims = mesh.root_dims(), param_dims = param_mesh.root_dims();
  std::vector<int> owner(size_t(root.ndim()), -1);  // 0: FSDP, 1: the parameter's mesh
  for (int64_t d : fsdp_dims) owner[size_t(d)] = 0;
  for (int64_t d : param_dims) {
    DT_CHECK_ARG(owner[size_t(d)] != 0, "fully_shard: parameter ", p.name, " lives on ", param_mesh.to_string(),
                 ", which shares mesh dim ", d, " of ", root.to_string(), " with the FSDP mesh ", mesh.to_string());
    owner[size_t(d)] = 1;
  }
  // The shard mesh: the root's dims that FSDP or the parameter uses, and those of size 1. A larger dim used by
  // neither (a pipeline's pp dim, whose coordinates hold other stages) is left out: the shard mesh is then the
  // sub-mesh of the others through this rank, which needs named dims.
  std::vector<int64_t> kept, sub_index(size_t(root.ndim()), -1);
  std::vector<std::string> kept_names;
  for (int64_t d = 0; d < root.ndim(); ++d) {
    if (owner[size_t(d)] < 0 && root.size(d) > 1) {
      DT_CHECK_ARG(root.shape().has_names(), "fully_shard: mesh dim ", d, " of ", root.to_string(),
                   " belongs to neither the FSDP mesh ", mesh.to_string(), " nor parameter ", p.name, "'s mesh ",
                   param_mesh.to_string(), " (name the mesh's dims to leave it out of the shards' mesh)");
      continue;
    }
    sub_index[size_t(d)] = int64_t(kept.size());
    kept.push_back(d);
    if (root.shape().has_names()) kept_names.push_back(root.shape().names()[size_t(d)]);
  }
  std::vector<Placement> pl(kept.size(), Replicate{});
  for (size_t i = 0; i < param_dims.size(); ++i)
    pl[size_t(sub_index[size_t(param_dims[i])])] = param_spec.placement(int64_t(i));
  const int64_t fsdp_shard = sub_index[size_t(fsdp_dims[size_t(shard_dim)])];
  pl[size_t(fsdp_shard)] = Shard{0};
  ShardOrder order;
  for (int64_t t = 0; t < int64_t(p.global_shape.size()); ++t) {
    std::vector<int64_t> splitters;
    for (int64_t m : param_spec.splitters(t)) splitters.push_back(sub_index[size_t(param_dims[size_t(m)])]);
    if (t == 0) splitters.push_back(fsdp_shard);
    if (!splitters.empty()) order[t] = splitters;
  }
  p.shard_mesh = kept.size() == size_t(root.ndim()) ? root : root.sub_mesh(kept_names);
  p.shard_spec = ShardingSpec(pl, order);
}

}  // namespace

GroupLayout make_group_layout(const std::vector<std::string>& names, const std::vector<DTensor>& params,
                              const DeviceMesh& mesh, const FsdpOptions& options) {
  DT_CHECK_ARG(mesh.defined() && (mesh.ndim() == 1 || mesh.ndim() == 2), "fully_shard: the FSDP mesh must be 1-d ",
               "(FSDP) or 2-d (HSDP: replicate, shard); got ", mesh.to_string());
  DT_CHECK_ARG(mesh.is_member(), "fully_shard: rank ", mesh.global_rank(), " is not part of the FSDP mesh ",
               mesh.to_string());
  const MixedPrecisionPolicy& mp = options.mp_policy;
  for (const std::optional<DType>& d : {mp.param_dtype, mp.reduce_dtype, mp.output_dtype})
    DT_CHECK_ARG(!d || is_floating(*d), "fully_shard: mixed precision dtypes must be floating, got ", dtype_name(*d));
  if (options.offload_policy.cpu_offload)
    DT_CHECK_ARG(mesh.device().is_cuda(), "fully_shard: cpu_offload keeps a CUDA run's shards in host memory; the ",
                 "FSDP mesh ", mesh.to_string(), " is on the host already");
  GroupLayout g;
  g.shard_size = mesh.size(mesh.ndim() - 1);
  const int64_t shard_rank = mesh.local_rank(mesh.ndim() - 1);
  if (const int64_t* k = std::get_if<int64_t>(&options.reshard_after_forward))
    DT_CHECK_ARG(*k > 1 && *k < g.shard_size && g.shard_size % *k == 0, "fully_shard: reshard_after_forward = ", *k,
                 " must divide the shard size ", g.shard_size, " and lie strictly between 1 and it (true and false ",
                 "are the ends)");
  for (size_t i = 0; i < params.size(); ++i) {
    const DTensor& t = params[i];
    ParamLayout p;
    p.name = names[i];
    DT_CHECK_ARG(t.defined(), "fully_shard: parameter ", p.name, " is not materialized");
    DT_CHECK_ARG(t.dim() >= 1, "fully_shard: parameter ", p.name, " is a scalar; FSDP shards dim 0");
    DT_CHECK_ARG(!t.spec().has_partial(), "fully_shard: parameter ", p.name, " is ", t.spec().to_string(),
                 "; a parameter cannot be Partial");
    p.orig_mesh = t.mesh();
    p.orig_spec = t.spec();
    p.global_shape = t.shape();
    p.unsharded_local_shape = t.to_local().shape();
    p.orig_dtype = t.dtype();
    const bool floating = is_floating(t.dtype());
    p.param_dtype = floating && mp.param_dtype ? *mp.param_dtype : t.dtype();
    p.reduce_dtype = floating && mp.reduce_dtype ? *mp.reduce_dtype : p.param_dtype;
    p.rows = p.unsharded_local_shape[0];
    p.row_numel = 1;
    for (size_t d = 1; d < p.unsharded_local_shape.size(); ++d) p.row_numel *= p.unsharded_local_shape[d];
    p.shard_size = g.shard_size;
    p.chunk = ceil_div(p.rows, g.shard_size);
    p.padded_numel = round_up(p.chunk * p.row_numel, kAlign / int64_t(dtype_size(p.param_dtype)));
    p.reduce_padded_numel = round_up(p.chunk * p.row_numel, kAlign / int64_t(dtype_size(p.reduce_dtype)));
    place_shard(p, t.mesh(), t.spec(), mesh);
    p.sharded_local_shape = p.unsharded_local_shape;
    p.sharded_local_shape[0] = p.rows_of(shard_rank).size();
    // The layout math agrees: this rank's block of the shard spec is its rows of its unsharded block.
    const DeviceMesh& sm = p.shard_mesh;
    DT_ASSERT(local_shape(p.global_shape, sm.shape(), p.shard_spec, sm.coordinate()) == p.sharded_local_shape,
              "fsdp layout of ", p.name, ": ", p.shard_spec.to_string());
    g.params.push_back(std::move(p));
  }
  // All-gather slot: runs of one param_dtype, each starting aligned.
  for (size_t i = 0; i < g.params.size(); ++i) {
    ParamLayout& p = g.params[i];
    if (g.runs.empty() || g.runs.back().dtype != p.param_dtype) {
      g.slot_bytes = round_up(g.slot_bytes, kAlign);
      g.runs.push_back(SlotRun{i, i, p.param_dtype, g.slot_bytes});
    }
    g.runs.back().last = i + 1;
    p.slot_byte_offset = g.slot_bytes;
    g.slot_bytes += p.padded_numel * int64_t(dtype_size(p.param_dtype));
  }
  g.slot_bytes = round_up(g.slot_bytes, kAlign);
  // Reduce-scatter classes by reduce dtype (integer parameters get no gradients).
  std::map<DType, size_t> class_of;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const ParamLayout& p = g.params[i];
    if (!is_floating(p.reduce_dtype)) continue;
    auto [it, fresh] = class_of.emplace(p.reduce_dtype, g.reduce_classes.size());
    if (fresh) g.reduce_classes.push_back(ReduceClass{p.reduce_dtype, {}, 0});
    ReduceClass& rc = g.reduce_classes[it->second];
    rc.members.push_back(i);
    rc.slot_numel += p.reduce_padded_numel;
  }
  set_gradient_division(g, mesh, options);
  return g;
}

void set_gradient_division(GroupLayout& g, const DeviceMesh& mesh, const FsdpOptions& options) {
  const int64_t dp_size = mesh.size();
  const double factor = options.gradient_divide_factor.value_or(double(dp_size));
  DT_CHECK_ARG(factor > 0 && std::isfinite(factor), "fully_shard: gradient_divide_factor must be positive, got ",
               factor);
  g.average_in_collective = false;
  g.pre_divide = g.post_divide = 1;
  bool any_f16 = false;
  for (const ReduceClass& rc : g.reduce_classes) any_f16 = any_f16 || rc.dtype == DType::f16;
  if (any_f16) {
    double pre = 1;
    while (std::fmod(factor, pre * 2) == 0 && factor / pre > pre) pre *= 2;
    g.pre_divide = pre;
    g.post_divide = factor / pre;
  } else if (!options.gradient_divide_factor) {
    g.average_in_collective = true;
  } else {
    g.post_divide = factor;
  }
}

DTensor make_shard(const DTensor& param, const ParamLayout& p, bool cpu_offload) {
  const int64_t shard_rank = p.shard_mesh.local_rank(p.shard_spec.splitters(0).back());
  const IndexRange rows = p.rows_of(shard_rank);
  // The original dtype (the optimizer steps in it), on the host for cpu_offload.
  Tensor local = param.to_local().narrow(0, rows.begin, rows.size());
  local = cpu_offload ? local.to(Device::cpu()) : local.clone();
  return DTensor::from_local_unchecked(local, p.shard_mesh, p.shard_spec, p.global_shape);
}

}  // namespace dt::fsdp
