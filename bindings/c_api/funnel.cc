#include "bindings/c_api/funnel.h"

#include <cstring>

#include "core/error.h"

namespace dt::capi {
namespace {

thread_local std::string t_last_error;

constexpr int64_t kMaxDims = 64;

}  // namespace

void set_last_error(const std::string& message) { t_last_error = message; }
void clear_last_error() { t_last_error.clear(); }
const std::string& last_error() { return t_last_error; }

dt_status_t status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return DT_ERR_INVALID_ARGUMENT;
    case ErrorCode::kUnsupported:
      return DT_ERR_UNSUPPORTED;
    case ErrorCode::kTimeout:
      return DT_ERR_TIMEOUT;
    case ErrorCode::kRemoteError:
      return DT_ERR_REMOTE;
    case ErrorCode::kSystemError:
      return DT_ERR_SYSTEM;
    case ErrorCode::kCudaError:
      return DT_ERR_CUDA;
    case ErrorCode::kInternal:
      return DT_ERR_INTERNAL;
  }
  return DT_ERR_INTERNAL;
}

void require(const void* p, const char* what) { DT_CHECK_ARG(p != nullptr, what, " is NULL"); }

void require_array(const void* p, int64_t n, int64_t max, const char* what) {
  DT_CHECK_ARG(n >= 0 && n <= max, what, ": a count of ", n, " is outside [0, ", max, "]");
  DT_CHECK_ARG(n == 0 || p != nullptr, what, " is NULL but its count is ", n);
}

void require_owner(const Owned& o, const char* fn) {
  DT_CHECK_ARG(std::this_thread::get_id() == o.owner, fn,
               " communicates, so it must be called from the thread that created the world (calls from another "
               "thread would interleave collectives differently on each rank)");
}

// dt_dtype_t is the C API code column of core/dtype.h's table; each enumerator of c_api.h must equal its row's code.
#define DT_C_CODE_(n, type, str, fp, long_name, c_name, c_code, ...) \
  static_assert(DT_##c_name == (c_code), "dt_dtype_t DT_" #c_name " in c_api.h differs from core/dtype.h's row");
DT_FOR_EACH_DTYPE(DT_C_CODE_)
#undef DT_C_CODE_

DType to_dtype(int32_t code) {
  switch (code) {
#define DT_FROM_C_(n, type, str, fp, long_name, c_name, c_code, ...) \
  case c_code:                                                       \
    return DType::n;
    DT_FOR_EACH_DTYPE(DT_FROM_C_)
#undef DT_FROM_C_
  }
  std::string known;
#define DT_KNOWN_(n, type, str, fp, long_name, c_name, c_code, ...) \
  known += (known.empty() ? "" : ", ") + std::to_string(c_code) + " DT_" #c_name;
  DT_FOR_EACH_DTYPE(DT_KNOWN_)
#undef DT_KNOWN_
  DT_THROW(InvalidArgument, "unknown dtype code ", code, " (dt_dtype_t: ", known, ")");
}

int32_t from_dtype(DType dtype) {
  switch (dtype) {
#define DT_TO_C_(n, type, str, fp, long_name, c_name, c_code, ...) \
  case DType::n:                                                   \
    return c_code;
    DT_FOR_EACH_DTYPE(DT_TO_C_)
#undef DT_TO_C_
  }
  DT_THROW(InternalError, "dtype ", int(dtype), " has no C code");
}

Device to_device(const dt_device_t& d) {
  if (d.type == DT_DEVICE_CPU) {
    DT_CHECK_ARG(d.index == 0, "a CPU device has index 0, got ", d.index);
    return Device::cpu();
  }
  if (d.type == DT_DEVICE_CUDA) {
    DT_CHECK_ARG(d.index >= 0, "a CUDA device index must be >= 0, got ", d.index);
    return Device::cuda(d.index);
  }
  DT_THROW(InvalidArgument, "unknown device type ", d.type, " (DT_DEVICE_CPU = 1, DT_DEVICE_CUDA = 2)");
}

dt_device_t from_device(const Device& d) {
  return d.is_cpu() ? dt_device_t{DT_DEVICE_CPU, 0} : dt_device_t{DT_DEVICE_CUDA, int32_t(d.index)};
}

ReduceOp to_reduce_op(int32_t code) {
  DT_CHECK_ARG(code >= DT_REDUCE_SUM && code <= DT_REDUCE_PRODUCT, "unknown reduce op code ", code,
               " (dt_reduce_op_t: 0 DT_REDUCE_SUM .. 4 DT_REDUCE_PRODUCT)");
  return ReduceOp(uint8_t(code));
}

ShardingSpec to_spec(const dt_placement_t* placements, int32_t n, int64_t mesh_ndim, int64_t tensor_ndim) {
  require_array(placements, n, kMaxDims, "placements");
  DT_CHECK_ARG(n == mesh_ndim, "placements: ", n, " given for a mesh of ", mesh_ndim, " dims (one per mesh dim)");
  std::vector<Placement> ps;
  std::map<int64_t, std::vector<std::pair<int32_t, int64_t>>> orders;  // tensor dim -> (order, mesh dim)
  bool any_order = false;
  for (int32_t m = 0; m < n; ++m) {
    const dt_placement_t& p = placements[m];
    switch (p.kind) {
      case DT_REPLICATE:
        ps.push_back(Replicate{});
        break;
      case DT_PARTIAL:
        ps.push_back(Partial{to_reduce_op(p.reduce_op)});
        break;
      case DT_SHARD: {
        DT_CHECK_ARG(p.dim >= -tensor_ndim && p.dim < tensor_ndim, "placements[", m, "]: Shard(", p.dim,
                     ") of a tensor with ", tensor_ndim, " dims");
        const int64_t d = p.dim < 0 ? p.dim + tensor_ndim : p.dim;
        ps.push_back(Shard{d});
        orders[d].push_back({p.order, m});
        any_order |= p.order >= 0;
        break;
      }
      default:
        DT_THROW(InvalidArgument, "placements[", m, "]: unknown kind ", p.kind,
                 " (DT_REPLICATE = 0, DT_SHARD = 1, DT_PARTIAL = 2)");
    }
  }
  if (!any_order) return ShardingSpec(ps);
  ShardOrder order;
  for (auto& [d, list] : orders) {
    std::sort(list.begin(), list.end());
    for (size_t k = 0; k < list.size(); ++k)
      DT_CHECK_ARG(list[k].first == int32_t(k), "placements: the orders of the mesh dims sharding tensor dim ", d,
                   " must be 0..", list.size() - 1, " (or all -1)");
    for (const auto& [o, m] : list) order[d].push_back(m);
  }
  return ShardingSpec(ps, order);
}

std::vector<dt_placement_t> from_spec(const ShardingSpec& spec) {
  std::vector<dt_placement_t> out;
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m) {
    const Placement& p = spec[m];
    dt_placement_t c{DT_REPLICATE, 0, 0, -1};
    if (const Shard* s = std::get_if<Shard>(&p)) {
      c.kind = DT_SHARD;
      c.dim = int32_t(s->dim);
      const auto& sp = spec.splitters(s->dim);
      c.order = int32_t(std::find(sp.begin(), sp.end(), m) - sp.begin());
    } else if (const Partial* q = std::get_if<Partial>(&p)) {
      c.kind = DT_PARTIAL;
      c.reduce_op = int32_t(q->op);
    }
    out.push_back(c);
  }
  return out;
}

Tensor wrap_buffer(const dt_buffer_t* b, const char* what) {
  require(b, what);
  const DType dtype = to_dtype(b->dtype);
  require_array(b->shape, b->ndim, kMaxDims, (std::string(what) + ".shape").c_str());
  Shape shape(b->shape, b->shape + b->ndim);
  for (int64_t s : shape) DT_CHECK_ARG(s >= 0, what, ": shape ", shape_str(shape), " has a negative size");
  Shape strides;
  if (b->strides != nullptr) strides.assign(b->strides, b->strides + b->ndim);
  const bool empty = shape_numel(shape) == 0;
  DT_CHECK_ARG(b->data != nullptr || empty, what, ".data is NULL for a buffer of ", shape_numel(shape), " elements");
  return Tensor::from_blob(b->data, shape, dtype, to_device(b->device), {}, strides);
}

void copy_out(const std::string& text, char* buf, size_t cap, size_t* needed) {
  if (needed != nullptr) *needed = text.size() + 1;
  if (buf == nullptr || cap == 0) return;
  const size_t n = std::min(cap - 1, text.size());
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

void copy_ints(const std::vector<int64_t>& values, int64_t* out, int32_t cap, const char* what) {
  require(out, what);
  DT_CHECK_ARG(cap >= int32_t(values.size()), what, ": room for ", cap, " values, ", values.size(), " needed");
  std::copy(values.begin(), values.end(), out);
}

}  // namespace dt::capi
