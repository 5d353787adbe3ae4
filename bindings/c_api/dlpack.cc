// Local shards in and out as DLPack tensors (DLManagedTensorVersioned), zero copy where the layout allows.
#include <algorithm>

#include "bindings/c_api/dlpack_block.h"
#include "bindings/c_api/funnel.h"
#include "core/error.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace dt::capi {
dt_from_local_params_t from_local_params(const dt_from_local_params_t* p);
dt_tensor_t tensor_from_local(const std::shared_ptr<MeshObject>& m, const Tensor& local,
                              const dt_placement_t* placements, int32_t n, const dt_from_local_params_t& q);
}  // namespace dt::capi

namespace {

// What an exported DLPack tensor owns: the block (its storage stays alive) and the shape and strides arrays.
// One allocation per export: the DLPack shape and strides are the block's own (a Tensor's shape never changes).
struct Export {
  Tensor block;
  DLManagedTensorVersioned managed{};
};

// DLPack's type code is a column of core/dtype.h's table; the bits are the element's.
DLDataType dl_dtype(DType d) {
  switch (d) {
#define DT_DL_(n, type, str, fp, long_name, c_name, c_code, dl_code, ...) \
  case DType::n:                                                          \
    return {kDL##dl_code, uint8_t(8 * sizeof(type)), 1};
    DT_FOR_EACH_DTYPE(DT_DL_)
#undef DT_DL_
  }
  DT_THROW(InternalError, "dtype without a DLPack code");
}

DType from_dl_dtype(DLDataType t) {
  DT_CHECK_ARG(t.lanes == 1, "DLPack dtype with ", t.lanes, " lanes (vector types are not supported)");
  for (int i = 0; i < kNumDTypes; ++i) {
    const DLDataType x = dl_dtype(DType(i));
    if (x.code == t.code && x.bits == t.bits) return DType(i);
  }
  DT_THROW(Unsupported, "DLPack dtype (code ", int(t.code), ", ", int(t.bits), " bits) has no dtensor dtype");
}

Device from_dl_device(DLDevice d) {
  if (d.device_type == kDLCPU) return Device::cpu();
  if (d.device_type == kDLCUDA) return Device::cuda(d.device_id);
  DT_THROW(Unsupported, "DLPack device type ", int(d.device_type), " (dtensor takes kDLCPU and kDLCUDA)");
}

// Whether strides are exactly the row-major ones of shape (what contiguous_strides gives a shape without zeros;
// anything else, zeros included, takes import_block's checked path), without making them.
bool is_row_major(const Shape& shape, const Shape& strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] <= 0 || strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

// Calls the producer's deleter once unless disarmed.
struct Owner {
  DLManagedTensorVersioned* t;
  ~Owner() {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
};

}  // namespace

namespace dt::capi {

DLManagedTensorVersioned* export_block(const Tensor& local, uint32_t flags) {
  auto e = std::make_unique<Export>();
  if (flags & DT_DLPACK_COPY)
    e->block = local.clone();
  else
    e->block = local;  // (one copy: a conditional expression would copy, then assign)
  DLManagedTensorVersioned& m = e->managed;
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.flags = ((flags & DT_DLPACK_READ_ONLY) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
            ((flags & DT_DLPACK_COPY) ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
  DLTensor& d = m.dl_tensor;
  d.data = e->block.numel() == 0 ? nullptr : e->block.data_ptr();
  d.device = e->block.device().is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, int32_t(e->block.device().index)};
  d.ndim = int32_t(e->block.shape().size());
  d.dtype = dl_dtype(e->block.dtype());
  d.shape = const_cast<int64_t*>(e->block.shape().data());  // DLPack's consumers only read them
  d.strides = const_cast<int64_t*>(e->block.strides().data());
  d.byte_offset = 0;
  m.manager_ctx = e.get();
  m.deleter = [](DLManagedTensorVersioned* self) { delete static_cast<Export*>(self->manager_ctx); };
  return &e.release()->managed;
}

Tensor import_block(DLManagedTensorVersioned* local, bool copy) {
  Owner owner{local};  // the producer's deleter runs on every path unless the block takes the memory over
  require(local, "local");
  DT_CHECK_ARG(local->version.major == DLPACK_MAJOR_VERSION, "DLPack major version ", local->version.major,
               " (dtensor reads ", DLPACK_MAJOR_VERSION, ".x)");
  const DLTensor& d = local->dl_tensor;
  require_array(d.shape, d.ndim, 64, "local.dl_tensor.shape");
  const DType dtype = from_dl_dtype(d.dtype);
  const Device device = from_dl_device(d.device);
  const Shape shape(d.shape, d.shape + d.ndim);
  Shape strides;
  if (d.strides != nullptr) strides.assign(d.strides, d.strides + d.ndim);
  void* data = d.data == nullptr ? nullptr : static_cast<char*>(d.data) + d.byte_offset;
  DT_CHECK_ARG(data != nullptr || shape_numel(shape) == 0, "local.dl_tensor.data is NULL");
  // A block in row-major order without a copy asked for (every gradient a framework hands over) becomes the tensor
  // directly; anything else is checked through a view first. (Per parameter and step: one tensor, not two.)
  const bool plain = !copy && !(local->flags & DLPACK_FLAG_BITMASK_READ_ONLY) &&
                     (strides.empty() || is_row_major(shape, strides)) &&
                     std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s >= 0; });
  if (!plain) {
    const Tensor view = Tensor::from_blob(data, shape, dtype, device, {}, strides);
    if (copy || !view.is_contiguous() || (local->flags & DLPACK_FLAG_BITMASK_READ_ONLY))
      return view.clone();  // the producer's memory is released when `owner` goes
  }
  DLManagedTensorVersioned* t = local;
  owner.t = nullptr;  // the storage's deleter releases it now
  return Tensor::from_blob(data, shape, dtype, device, [t](void*) {
    if (t->deleter != nullptr) t->deleter(t);
  });
}

}  // namespace dt::capi

extern "C" {

dt_status_t dt_tensor_to_dlpack(dt_tensor_t t, uint32_t flags, DLManagedTensorVersioned** out) {
  return call("dt_tensor_to_dlpack", [&] {
    auto o = get<TensorObject>(t, "tensor");
    require(out, "out");
    DT_CHECK_ARG((flags & ~uint32_t(DT_DLPACK_COPY | DT_DLPACK_READ_ONLY)) == 0, "unknown flags 0x", std::hex, flags);
    *out = export_block(o->tensor.to_local(), flags);
  });
}

dt_status_t dt_tensor_from_dlpack(dt_mesh_t mesh, DLManagedTensorVersioned* local, const dt_placement_t* placements,
                                  int32_t n, const dt_from_local_params_t* params, uint32_t flags, dt_tensor_t* out) {
  Owner owner{local};  // the producer's deleter runs on every path unless the DTensor takes the memory over
  return call("dt_tensor_from_dlpack", [&] {
    require(local, "local");
    auto m = get<MeshObject>(mesh, "mesh");
    require_owner(*m, "dt_tensor_from_dlpack");
    require(out, "out");
    DT_CHECK_ARG((flags & ~uint32_t(DT_DLPACK_COPY)) == 0, "unknown flags 0x", std::hex, flags);
    const dt_from_local_params_t q = from_local_params(params);
    owner.t = nullptr;  // import_block runs the deleter from here on
    const Tensor block = import_block(local, (flags & DT_DLPACK_COPY) != 0);
    *out = capi::tensor_from_local(m, block, placements, n, q);
  });
}

}  // extern "C"
