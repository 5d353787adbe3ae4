// DTensors, their asynchronous work, ops, and the pure layout and plan queries.
#include "bindings/c_api/funnel.h"
#include "core/error.h"
#include "dtensor/ops.h"
#include "placement/layout.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {

constexpr int64_t kMaxDims = 64;

dt_tensor_t wrap_tensor(DTensor t, std::shared_ptr<MeshObject> mesh) {
  auto o = std::make_shared<TensorObject>();
  o->owner = mesh->owner;
  o->tensor = std::move(t);
  o->mesh = std::move(mesh);
  return make_handle<dt_tensor_t>(std::move(o));
}

// Calls a C release callback once, from the storage's deleter.
Storage::Deleter release_of(void (*release)(void*), void* context) {
  if (release == nullptr) return {};
  return [release, context](void*) { release(context); };
}

}  // namespace

namespace dt::capi {

// Shared with dlpack.cc: the caller's params (NULL: the defaults), checked.
dt_from_local_params_t from_local_params(const dt_from_local_params_t* p) {
  const dt_from_local_params_t q = read_params(p, &dt_from_local_params_init, "params", "dt_from_local_params_init");
  DT_CHECK_ARG(q.mode == DT_COPY || q.mode == DT_ZERO_COPY, "params.mode ", q.mode, " (DT_COPY 0, DT_ZERO_COPY 1)");
  return q;
}

// Shared with dlpack.cc: a DTensor from a local Tensor (already the caller's memory or a copy).
dt_tensor_t tensor_from_local(const std::shared_ptr<MeshObject>& m, const Tensor& local,
                              const dt_placement_t* placements, int32_t n, const dt_from_local_params_t& q) {
  const ShardingSpec spec = to_spec(placements, n, m->mesh.ndim(), local.dim());
  std::optional<Shape> global;
  if (q.global_shape != nullptr || q.global_ndim != 0) {
    require_array(q.global_shape, q.global_ndim, kMaxDims, "params.global_shape");
    global = Shape(q.global_shape, q.global_shape + q.global_ndim);
  }
  FromLocalOptions o;
  o.shard_order = spec.shard_order();
  o.run_check = q.run_check != 0;
  DTensor t = DTensor::from_local(local, m->mesh, spec.placements(), global, o);
  return wrap_tensor(std::move(t), m);
}

}  // namespace dt::capi

extern "C" {

void dt_from_local_params_init(dt_from_local_params_t* p) {
  if (p == nullptr) return;
  *p = dt_from_local_params_t{};
  p->struct_size = sizeof(dt_from_local_params_t);
}

dt_status_t dt_tensor_from_local(dt_mesh_t mesh, const dt_buffer_t* local, const dt_placement_t* placements, int32_t n,
                                 const dt_from_local_params_t* params, dt_tensor_t* out) {
  return call("dt_tensor_from_local", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require_owner(*m, "dt_tensor_from_local");
    require(out, "out");
    const dt_from_local_params_t q = from_local_params(params);
    Tensor view = wrap_buffer(local, "local");
    Tensor block;
    if (q.mode == DT_ZERO_COPY) {
      DT_CHECK_ARG(view.is_contiguous(), "local: DT_ZERO_COPY needs a contiguous buffer (give strides NULL)");
      block = Tensor::from_blob(local->data, view.shape(), view.dtype(), view.device(),
                                release_of(q.release, q.release_context));
    } else {
      block = view.clone();
    }
    *out = capi::tensor_from_local(m, block, placements, n, q);
  });
}

dt_status_t dt_tensor_distribute(dt_mesh_t mesh, const dt_buffer_t* full, const dt_placement_t* placements, int32_t n,
                                 int32_t src_rank, dt_tensor_t* out) {
  return call("dt_tensor_distribute", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require_owner(*m, "dt_tensor_distribute");
    require(out, "out");
    require(full, "full");
    DT_CHECK_ARG(src_rank >= -1, "src_rank ", src_rank, ": a global rank, or -1 (every rank passes the tensor)");
    const bool has_data = full->data != nullptr || src_rank == -1;
    if (!has_data || (src_rank >= 0 && m->mesh.global_rank() != src_rank && full->data == nullptr)) {
      // A non-source rank without data: only the dtype and shape are read.
      require_array(full->shape, full->ndim, kMaxDims, "full.shape");
      const Shape shape(full->shape, full->shape + full->ndim);
      const ShardingSpec spec = to_spec(placements, n, m->mesh.ndim(), int64_t(shape.size()));
      *out = wrap_tensor(
          distribute_tensor(shape, to_dtype(full->dtype), m->mesh, spec.placements(), spec.shard_order(), src_rank), m);
      return;
    }
    const Tensor t = wrap_buffer(full, "full");
    const ShardingSpec spec = to_spec(placements, n, m->mesh.ndim(), t.dim());
    const std::optional<int64_t> src = src_rank < 0 ? std::nullopt : std::optional<int64_t>(src_rank);
    *out = wrap_tensor(distribute_tensor(t, m->mesh, spec.placements(), spec.shard_order(), src), m);
  });
}

dt_status_t dt_tensor_dtype(dt_tensor_t t, int32_t* dtype) {
  return call("dt_tensor_dtype", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(dtype, "dtype");
    *dtype = from_dtype(o->tensor.dtype());
  });
}

dt_status_t dt_tensor_ndim(dt_tensor_t t, int32_t* ndim) {
  return call("dt_tensor_ndim", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(ndim, "ndim");
    *ndim = int32_t(o->tensor.dim());
  });
}

dt_status_t dt_tensor_shape(dt_tensor_t t, int64_t* shape, int32_t cap) {
  return call("dt_tensor_shape",
              [&] { copy_ints(get<TensorObject>(t, "tensor")->tensor.shape(), shape, cap, "shape"); });
}

dt_status_t dt_tensor_local_shape(dt_tensor_t t, int64_t* shape, int32_t cap) {
  return call("dt_tensor_local_shape",
              [&] { copy_ints(get<TensorObject>(t, "tensor")->tensor.to_local().shape(), shape, cap, "shape"); });
}

dt_status_t dt_tensor_local_offset(dt_tensor_t t, int64_t* offset, int32_t cap) {
  return call("dt_tensor_local_offset",
              [&] { copy_ints(get<TensorObject>(t, "tensor")->tensor.local_offset(), offset, cap, "offset"); });
}

dt_status_t dt_tensor_placements(dt_tensor_t t, dt_placement_t* out, int32_t cap, int32_t* n) {
  return call("dt_tensor_placements", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(n, "n");
    const std::vector<dt_placement_t> ps = from_spec(o->tensor.spec());
    require(out, "out");
    DT_CHECK_ARG(cap >= int32_t(ps.size()), "out: room for ", cap, " placements, ", ps.size(), " needed");
    std::copy(ps.begin(), ps.end(), out);
    *n = int32_t(ps.size());
  });
}

dt_status_t dt_tensor_mesh(dt_tensor_t t, dt_mesh_t* out) {
  return call("dt_tensor_mesh", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(out, "out");
    auto m = std::make_shared<MeshObject>(*o->mesh);
    m->mesh = o->tensor.mesh();
    *out = make_handle<dt_mesh_t>(std::move(m));
  });
}

dt_status_t dt_tensor_local_data(dt_tensor_t t, void** data) {
  return call("dt_tensor_local_data", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(data, "data");
    const Tensor& local = o->tensor.to_local();
    DT_CHECK_ARG(local.is_contiguous(), "the local block is not contiguous (use dt_tensor_to_local)");
    *data = local.numel() == 0 ? nullptr : local.data_ptr();
  });
}

dt_status_t dt_tensor_to_local(dt_tensor_t t, const dt_buffer_t* dst) {
  return call("dt_tensor_to_local", [&] {
    auto o = get<TensorObject>(t, "tensor");
    Tensor out = wrap_buffer(dst, "dst");
    const Tensor& local = o->tensor.to_local();
    DT_CHECK_ARG(out.shape() == local.shape() && out.dtype() == local.dtype(), "dst is ", dtype_name(out.dtype()), " ",
                 shape_str(out.shape()), " but the local block is ", dtype_name(local.dtype()), " ",
                 shape_str(local.shape()));
    out.copy_(local);
  });
}

dt_status_t dt_tensor_full(dt_tensor_t t, const dt_buffer_t* dst) {
  return call("dt_tensor_full", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require_owner(*o, "dt_tensor_full");
    Tensor out = wrap_buffer(dst, "dst");
    DT_CHECK_ARG(out.shape() == o->tensor.shape() && out.dtype() == o->tensor.dtype(), "dst is ",
                 dtype_name(out.dtype()), " ", shape_str(out.shape()), " but the tensor is ",
                 dtype_name(o->tensor.dtype()), " ", shape_str(o->tensor.shape()));
    out.copy_(o->tensor.full_tensor());
  });
}

dt_status_t dt_tensor_redistribute(dt_tensor_t t, const dt_placement_t* placements, int32_t n, dt_tensor_t* out) {
  return call("dt_tensor_redistribute", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require_owner(*o, "dt_tensor_redistribute");
    require(out, "out");
    const ShardingSpec spec = to_spec(placements, n, o->tensor.mesh().ndim(), o->tensor.dim());
    *out = wrap_tensor(o->tensor.redistribute(spec), o->mesh);
  });
}

dt_status_t dt_tensor_redistribute_async(dt_tensor_t t, const dt_placement_t* placements, int32_t n, dt_work_t* out) {
  return call("dt_tensor_redistribute_async", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require_owner(*o, "dt_tensor_redistribute_async");
    require(out, "out");
    const ShardingSpec spec = to_spec(placements, n, o->tensor.mesh().ndim(), o->tensor.dim());
    auto w = std::make_shared<WorkObject>();
    w->owner = o->owner;
    w->mesh = o->mesh;
    w->work = o->tensor.redistribute_async(spec.placements(), spec.shard_order());
    *out = make_handle<dt_work_t>(std::move(w));
  });
}

dt_status_t dt_tensor_describe(dt_tensor_t t, char* buf, size_t cap, size_t* needed) {
  return call("dt_tensor_describe",
              [&] { copy_out(get<TensorObject>(t, "tensor")->tensor.describe(), buf, cap, needed); });
}

dt_status_t dt_tensor_destroy(dt_tensor_t t) {
  return call("dt_tensor_destroy", [&] { release<TensorObject>(t, "tensor"); });
}

// ---- work ----

dt_status_t dt_work_wait(dt_work_t work, dt_tensor_t* out) {
  return call("dt_work_wait", [&] {
    auto w = get<WorkObject>(work, "work");
    require_owner(*w, "dt_work_wait");
    DT_CHECK_ARG(!w->waited, "this work was already waited on");
    if (auto* r = std::get_if<RedistributeHandle>(&w->work)) {
      require(out, "out (a redistribution's result)");
      w->waited = true;
      *out = wrap_tensor(r->wait(), w->mesh);
      return;
    }
    w->waited = true;
    std::get<checkpoint::SaveHandle>(w->work).wait();
    if (out != nullptr) *out = nullptr;
  });
}

dt_status_t dt_work_test(dt_work_t work, int32_t* done) {
  return call("dt_work_test", [&] {
    auto w = get<WorkObject>(work, "work");
    require(done, "done");
    if (auto* r = std::get_if<RedistributeHandle>(&w->work)) {
      *done = w->waited || r->is_completed() ? 1 : 0;
    } else {
      *done = w->waited || std::get<checkpoint::SaveHandle>(w->work).is_completed() ? 1 : 0;
    }
  });
}

dt_status_t dt_work_destroy(dt_work_t work) {
  return call("dt_work_destroy", [&] { release<WorkObject>(work, "work"); });
}

// ---- ops ----

dt_status_t dt_tensor_op(const char* op, const dt_tensor_t* inputs, int32_t n_inputs, const dt_op_param_t* params,
                         int32_t n_params, dt_tensor_t* outputs, int32_t cap, int32_t* n_out) {
  return call("dt_tensor_op", [&] {
    require(op, "op");
    require_array(inputs, n_inputs, 64, "inputs");
    require_array(params, n_params, 64, "params");
    require(n_out, "n_out");
    DT_CHECK_ARG(ops::is_registered_op(op), "no op named '", op, "' (dt_ops_list lists them)");
    std::vector<DTensor> in;
    std::shared_ptr<TensorObject> first;
    for (int32_t i = 0; i < n_inputs; ++i) {
      auto o = get<TensorObject>(inputs[i], "inputs[i]");
      require_owner(*o, "dt_tensor_op");
      if (!first) first = o;
      in.push_back(o->tensor);
    }
    ops::OpParams p;
    for (int32_t i = 0; i < n_params; ++i) {
      const dt_op_param_t& q = params[i];
      DT_CHECK_ARG(q.name != nullptr && *q.name, "params[", i, "].name is NULL or empty");
      switch (q.kind) {
        case DT_PARAM_BOOL:
          p.set(q.name, q.i != 0);
          break;
        case DT_PARAM_INT:
          p.set(q.name, q.i);
          break;
        case DT_PARAM_DOUBLE:
          p.set(q.name, q.d);
          break;
        case DT_PARAM_INTS:
          require_array(q.ints, q.n_ints, kMaxDims, "params[i].ints");
          p.set(q.name, std::vector<int64_t>(q.ints, q.ints + q.n_ints));
          break;
        case DT_PARAM_STRING:
          require(q.s, "params[i].s");
          p.set(q.name, std::string(q.s));
          break;
        default:
          DT_THROW(InvalidArgument, "params[", i, "] ('", q.name, "'): unknown kind ", q.kind);
      }
    }
    DT_CHECK_ARG(first != nullptr, "op '", op, "' needs at least one input tensor");
    std::vector<DTensor> res = ops::dispatch(op, in, p);
    require_array(outputs, int64_t(res.size()), cap, "outputs (room for the results)");
    for (size_t i = 0; i < res.size(); ++i) outputs[i] = wrap_tensor(std::move(res[i]), first->mesh);
    *n_out = int32_t(res.size());
  });
}

dt_status_t dt_ops_list(char* buf, size_t cap, size_t* needed) {
  return call("dt_ops_list", [&] {
    std::string s;
    for (const std::string& n : ops::registered_ops()) s += (s.empty() ? "" : ",") + n;
    copy_out(s, buf, cap, needed);
  });
}

}  // extern "C"
