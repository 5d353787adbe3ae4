// The FSDP engine (fsdp/param_group.h) through the C API, for frameworks that keep their own modules and autograd.
#include <cmath>

#include "bindings/c_api/dlpack_block.h"
#include "bindings/c_api/funnel.h"
#include "core/error.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {

dt_tensor_t wrap(const DTensor& t, const std::shared_ptr<FsdpGroupObject>& g) {
  auto o = std::make_shared<TensorObject>();
  o->owner = g->owner;
  o->tensor = t;
  o->mesh = g->mesh;
  return make_handle<dt_tensor_t>(std::move(o));
}

size_t index_of(const FsdpGroupObject& g, int32_t i) {
  DT_CHECK_ARG(i >= 0 && size_t(i) < g.group->size(), "parameter index ", i, " outside [0, ", g.group->size(), ")");
  return size_t(i);
}

// `out` holds one entry per parameter of the group.
void require_size(const fsdp::ParamGroup& g, const void* out, int32_t n) {
  require(out, "out");
  DT_CHECK_ARG(n >= 0 && size_t(n) == g.size(), "n ", n, ": group '", g.name(), "' has ", g.size(), " parameters");
}

std::shared_ptr<FsdpGroupObject> group(dt_fsdp_group_t h, const char* fn) {
  auto g = get<FsdpGroupObject>(h, "group");
  require_owner(*g, fn);
  return g;
}

}  // namespace

extern "C" {

void dt_fsdp_options_init(dt_fsdp_options_t* o) {
  if (o == nullptr) return;
  *o = dt_fsdp_options_t{};
  o->struct_size = sizeof(dt_fsdp_options_t);
  o->reshard_after_forward = 1;
  o->param_dtype = -1;
  o->reduce_dtype = -1;
}

dt_status_t dt_fsdp_group_create(dt_mesh_t mesh, const char* name, const char* const* param_names,
                                 const dt_tensor_t* params, int32_t n, const dt_fsdp_options_t* options,
                                 dt_fsdp_group_t* out) {
  return call("dt_fsdp_group_create", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require_owner(*m, "dt_fsdp_group_create");
    require(out, "out");
    require_array(params, n, int64_t(1) << 20, "params");
    const dt_fsdp_options_t q = read_params(options, &dt_fsdp_options_init, "options", "dt_fsdp_options_init");
    fsdp::FsdpOptions o;
    DT_CHECK_ARG(q.reshard_after_forward >= 0, "options.reshard_after_forward ", q.reshard_after_forward,
                 " (1 true, 0 false, k > 1 a share)");
    if (q.reshard_after_forward <= 1) {
      o.reshard_after_forward = q.reshard_after_forward == 1;
    } else {
      o.reshard_after_forward = int64_t(q.reshard_after_forward);
    }
    if (q.param_dtype != -1) o.mp_policy.param_dtype = to_dtype(q.param_dtype);
    if (q.reduce_dtype != -1) o.mp_policy.reduce_dtype = to_dtype(q.reduce_dtype);
    DT_CHECK_ARG(q.gradient_divide_factor >= 0, "options.gradient_divide_factor ", q.gradient_divide_factor, " < 0");
    if (q.gradient_divide_factor > 0) o.gradient_divide_factor = q.gradient_divide_factor;
    o.offload_policy.cpu_offload = q.cpu_offload != 0;
    std::vector<std::string> names;
    std::vector<DTensor> values;
    for (int32_t i = 0; i < n; ++i) {
      values.push_back(get<TensorObject>(params[i], "params[i]")->tensor);
      names.push_back(param_names != nullptr && param_names[i] != nullptr ? param_names[i]
                                                                          : "param" + std::to_string(i));
    }
    auto g = std::make_shared<FsdpGroupObject>();
    g->owner = m->owner;
    g->mesh = m;
    g->group = std::make_unique<fsdp::ParamGroup>(name != nullptr ? name : "group", names, values, m->mesh, o);
    *out = make_handle<dt_fsdp_group_t>(std::move(g));
  });
}

dt_status_t dt_fsdp_group_unshard(dt_fsdp_group_t g, int32_t async) {
  return call("dt_fsdp_group_unshard", [&] { group(g, "dt_fsdp_group_unshard")->group->unshard(async != 0); });
}

dt_status_t dt_fsdp_group_wait_unshard(dt_fsdp_group_t g) {
  return call("dt_fsdp_group_wait_unshard", [&] { group(g, "dt_fsdp_group_wait_unshard")->group->wait_for_unshard(); });
}

dt_status_t dt_fsdp_group_reshard(dt_fsdp_group_t g, int32_t post_forward) {
  return call("dt_fsdp_group_reshard", [&] { group(g, "dt_fsdp_group_reshard")->group->reshard(post_forward != 0); });
}

dt_status_t dt_fsdp_group_sharded_param(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out) {
  return call("dt_fsdp_group_sharded_param", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    require(out, "out");
    *out = wrap(o->group->sharded_param(index_of(*o, i)), o);
  });
}

dt_status_t dt_fsdp_group_unsharded_param(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out) {
  return call("dt_fsdp_group_unsharded_param", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    require(out, "out");
    const size_t k = index_of(*o, i);
    DT_CHECK_ARG(o->group->is_unsharded(), "group '", o->group->name(),
                 "' is not unsharded: call dt_fsdp_group_unshard and dt_fsdp_group_wait_unshard first");
    *out = wrap(o->group->unsharded_param(k), o);
  });
}

dt_status_t dt_fsdp_group_accumulate_grad(dt_fsdp_group_t g, int32_t i, dt_tensor_t grad) {
  return call("dt_fsdp_group_accumulate_grad", [&] {
    auto o = group(g, "dt_fsdp_group_accumulate_grad");
    const size_t k = index_of(*o, i);
    o->group->accumulate_grad(k, get<TensorObject>(grad, "grad")->tensor);
  });
}

dt_status_t dt_fsdp_group_reduce_grads(dt_fsdp_group_t g) {
  return call("dt_fsdp_group_reduce_grads", [&] { group(g, "dt_fsdp_group_reduce_grads")->group->reduce_grads(); });
}

dt_status_t dt_fsdp_group_wait_reduce(dt_fsdp_group_t g) {
  return call("dt_fsdp_group_wait_reduce", [&] { group(g, "dt_fsdp_group_wait_reduce")->group->wait_for_reduce(); });
}

dt_status_t dt_fsdp_group_sharded_grad(dt_fsdp_group_t g, int32_t i, dt_tensor_t* out) {
  return call("dt_fsdp_group_sharded_grad", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    require(out, "out");
    const DTensor& grad = o->group->sharded_grad(index_of(*o, i));
    *out = grad.defined() ? wrap(grad, o) : nullptr;
  });
}

dt_status_t dt_fsdp_group_set_requires_gradient_sync(dt_fsdp_group_t g, int32_t on) {
  return call("dt_fsdp_group_set_requires_gradient_sync",
              [&] { get<FsdpGroupObject>(g, "group")->group->set_requires_gradient_sync(on != 0); });
}

dt_status_t dt_fsdp_group_set_gradient_divide_factor(dt_fsdp_group_t g, double factor) {
  return call("dt_fsdp_group_set_gradient_divide_factor", [&] {
    auto o = group(g, "dt_fsdp_group_set_gradient_divide_factor");
    DT_CHECK_ARG(factor >= 0 && std::isfinite(factor), "factor ", factor, ": 0 (the average) or a positive factor");
    o->group->set_gradient_divide_factor(factor > 0 ? std::optional<double>(factor) : std::nullopt);
  });
}

dt_status_t dt_fsdp_group_unsharded_data(dt_fsdp_group_t g, void** out, int32_t n) {
  return call("dt_fsdp_group_unsharded_data", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    const fsdp::ParamGroup& pg = *o->group;
    require_size(pg, out, n);
    DT_CHECK_ARG(pg.is_unsharded(), "group '", pg.name(),
                 "' is not unsharded: call dt_fsdp_group_unshard and dt_fsdp_group_wait_unshard first");
    for (size_t i = 0; i < pg.size(); ++i) {
      const Tensor& local = pg.unsharded_param(i).to_local();
      out[i] = local.numel() == 0 ? nullptr : local.data_ptr();
    }
  });
}

dt_status_t dt_fsdp_group_export(dt_fsdp_group_t g, int32_t what, DLManagedTensorVersioned** out, int32_t n) {
  return call("dt_fsdp_group_export", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    const fsdp::ParamGroup& pg = *o->group;
    require_size(pg, out, n);
    DT_CHECK_ARG(what == DT_FSDP_UNSHARDED_PARAMS || what == DT_FSDP_SHARDED_GRADS, "what ", what,
                 " (DT_FSDP_UNSHARDED_PARAMS or DT_FSDP_SHARDED_GRADS)");
    DT_CHECK_ARG(what != DT_FSDP_UNSHARDED_PARAMS || pg.is_unsharded(), "group '", pg.name(),
                 "' is not unsharded: call dt_fsdp_group_unshard and dt_fsdp_group_wait_unshard first");
    std::vector<DLManagedTensorVersioned*> made(pg.size(), nullptr);
    try {
      for (size_t i = 0; i < pg.size(); ++i) {
        const DTensor& t = what == DT_FSDP_UNSHARDED_PARAMS ? pg.unsharded_param(i) : pg.sharded_grad(i);
        if (t.defined()) made[i] = export_block(t.to_local(), 0);
      }
    } catch (...) {
      for (DLManagedTensorVersioned* m : made)
        if (m != nullptr) m->deleter(m);
      throw;
    }
    std::copy(made.begin(), made.end(), out);
  });
}

dt_status_t dt_fsdp_group_accumulate_grad_dlpack(dt_fsdp_group_t g, int32_t i, DLManagedTensorVersioned* grad) {
  // The block takes `grad` over first, so that its deleter runs on every path.
  return call("dt_fsdp_group_accumulate_grad_dlpack", [&] {
    require(grad, "grad");
    Tensor block = import_block(grad, false);
    auto o = group(g, "dt_fsdp_group_accumulate_grad_dlpack");
    const size_t k = index_of(*o, i);
    const DTensor& u = o->group->unsharded_param(k);
    DT_CHECK_ARG(block.shape() == u.to_local().shape(), "the gradient of ", o->group->param_name(k),
                 " has local shape ", shape_str(block.shape()), ", its gathered value ",
                 shape_str(u.to_local().shape()));
    o->group->accumulate_grad(k, DTensor::from_local_unchecked(std::move(block), u.mesh(), u.spec(), u.shape()));
  });
}

dt_status_t dt_fsdp_group_memory(dt_fsdp_group_t g, dt_fsdp_memory_t* out) {
  return call("dt_fsdp_group_memory", [&] {
    auto o = get<FsdpGroupObject>(g, "group");
    require(out, "out");
    DT_CHECK_ARG(out->struct_size >= sizeof(size_t), "out.struct_size is ", out->struct_size,
                 ": set it to sizeof(dt_fsdp_memory_t)");
    dt_fsdp_memory_t m{};
    m.struct_size = sizeof m;
    m.sharded_bytes = o->group->sharded_bytes();
    m.unsharded_bytes = o->group->unsharded_bytes();
    m.unsharded_grad_bytes = o->group->unsharded_grad_bytes();
    m.gather_buffer_bytes = o->group->gather_buffer_bytes();
    m.reduce_buffer_bytes = o->group->reduce_buffer_bytes();
    const size_t n = std::min(out->struct_size, sizeof m);
    std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&m) + sizeof(size_t),
                n - sizeof(size_t));
  });
}

dt_status_t dt_fsdp_group_destroy(dt_fsdp_group_t g) {
  return call("dt_fsdp_group_destroy", [&] { release<FsdpGroupObject>(g, "group"); });
}

}  // extern "C"
