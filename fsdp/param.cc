// One parameter of an FSDP group (fsdp/param.h).
#include "fsdp/param.h"

#include <cstring>

#include "collectives/host_window.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "dtensor/ops.h"

namespace dt::fsdp {

namespace {

DTensor unsharded_value(const std::shared_ptr<Storage>& storage, const ParamLayout& p) {
  Tensor local(storage, p.unsharded_local_shape, contiguous_strides(p.unsharded_local_shape), 0, p.param_dtype);
  return DTensor::from_local_unchecked(local, p.orig_mesh, p.orig_spec, p.global_shape);
}

}  // namespace

Param::Param(const DTensor& value, const ParamLayout& layout, const Device& device, bool cpu_offload)
    : layout_(&layout) {
  {
    MemoryKindScope kind(MemoryKind::kParameters);
    shard_ = make_shard(value, layout, cpu_offload);
  }
  // The stable storage of the gathered value: empty and released until the first unshard sizes it (allocating it
  // here would only park a block of every parameter's unsharded size in the pool's cache).
  MemoryKindScope kind(MemoryKind::kUnshardedParameters);
  storage_ = Storage::create(0, device);
  storage_->release();
  unsharded_ = unsharded_value(storage_, layout);
}

Tensor Param::rows_of(const Tensor& flat, int64_t rank) const {
  const IndexRange r = rows(rank);
  return flat.narrow(0, r.begin * layout_->row_numel, r.size() * layout_->row_numel);
}

Segment Param::rows_segment(int64_t rank, int64_t at, void* base, DType dtype) const {
  const IndexRange r = rows(rank);
  const int64_t bytes = base ? r.size() * row_bytes(dtype) : 0;
  return Segment{at, bytes, bytes ? static_cast<uint8_t*>(base) + r.begin * row_bytes(dtype) : nullptr};
}

void Param::allocate_unsharded() {
  if (!mapped_) storage_->resize(size_t(layout_->unsharded_numel()) * dtype_size(layout_->param_dtype));
}

void Param::release_unsharded() {
  if (!mapped_) storage_->release();
}

void Param::map_into(const std::shared_ptr<HostWindow>& window, size_t range, int64_t offset) {
  const ParamLayout& p = *layout_;
  const Device dev = storage_->device();
  // The shard moves into the window (the pool's copy is freed); its bytes stay charged to the parameters.
  const Tensor old = shard_.to_local().contiguous();
  const int64_t n = int64_t(old.nbytes());
  uint8_t* at = window->local() + offset;
  if (n > 0) std::memcpy(at, old.data_ptr(), size_t(n));
  std::shared_ptr<Storage> shard;
  {
    MemoryKindScope kind(MemoryKind::kParameters);
    count_memory(dev, MemoryKind::kParameters, n);
    shard =
        Storage::wrap(at, size_t(n), dev, [window, dev, n](void*) { count_memory(dev, MemoryKind::kParameters, -n); });
  }
  const Shape& shape = p.sharded_local_shape;
  shard_ = DTensor::from_local_unchecked(Tensor(shard, shape, contiguous_strides(shape), 0, old.dtype()), shard_.mesh(),
                                         shard_.spec(), shard_.shape());
  // The unsharded value: the range (no memory of its own, so nothing is charged).
  storage_ = Storage::wrap(window->range(range), size_t(p.unsharded_numel()) * dtype_size(p.param_dtype), dev,
                           [window](void*) {});
  unsharded_ = unsharded_value(storage_, p);
  mapped_ = true;
}

void Param::accumulate_grad(DTensor g) {
  const ParamLayout& p = *layout_;
  const DTensor& u = unsharded_;
  DT_CHECK_ARG(g.shape() == p.global_shape, "fsdp: the gradient of ", p.name, " has shape ", shape_str(g.shape()),
               ", the parameter ", shape_str(p.global_shape));
  // Cast first: the tensor-parallel reduction of a Partial gradient runs in the reduce dtype too. A gradient already
  // in the unsharded layout (the common case) is kept as it is, moved rather than copied: this runs per parameter and
  // step, and each DTensor copy allocates its shapes and spec.
  if (g.dtype() != p.reduce_dtype) g = to(g, p.reduce_dtype);
  if (!(g.mesh() == u.mesh() && g.spec() == u.spec())) g = g.redistribute_like(u);
  if (acc_.defined()) {
    acc_ = add(acc_, g);
  } else {
    acc_ = std::move(g);
  }
  if (const auto& st = acc_.to_local().storage()) st->set_memory_kind(MemoryKind::kGradients);
}

void Param::set_sharded_grad(Tensor values) {
  if (values.dtype() != shard_.dtype()) values = values.to(shard_.dtype());
  if (!(shard_.to_local().device() == values.device())) values = values.to(shard_.to_local().device());
  sharded_grad_ = DTensor::from_local_unchecked(std::move(values), shard_.mesh(), shard_.spec(), shard_.shape());
}

DTensor Param::take_sharded_grad() {
  DTensor out = std::move(sharded_grad_);
  sharded_grad_ = DTensor();
  return out;
}

}  // namespace dt::fsdp
