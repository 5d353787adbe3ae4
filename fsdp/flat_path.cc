// The flat data path (fsdp/flat_path.h).
#include "fsdp/flat_path.h"

#include "core/memory_stats.h"
#include "kernels/chunk_cat.h"
#include "kernels/ops/elementwise.h"

namespace dt::fsdp {

namespace {

// Rank r's rows of the unsharded parameters of one slot run, and their regions' sizes (padded): what slot r holds
// at the run's offset.
void run_rows(const GroupData& g, const SlotRun& run, int64_t rank, std::vector<kernels::StridedView>& views,
              std::vector<int64_t>& padded) {
  for (size_t i = run.first; i < run.last; ++i) {
    const Param& p = g.params[i];
    views.push_back(kernels::view_of(p.rows_of(p.unsharded().to_local().view({-1}), rank)));
    padded.push_back(p.layout().padded_numel);
  }
}

Tensor comm_buffer(int64_t bytes, const Device& dev) {
  MemoryKindScope kind(MemoryKind::kCommBuffers);
  return Tensor::empty({bytes}, DType::u8, dev);
}

}  // namespace

void copy_shards_into_slot(const GroupData& g, uint8_t* slot, Stream stream) {
  const Device dev = g.device;
  for (const SlotRun& run : g.layout.runs) {
    std::vector<kernels::StridedView> in;
    std::vector<int64_t> padded;
    std::vector<Tensor> staged;  // cpu_offload: the host shards, copied to the device first
    for (size_t i = run.first; i < run.last; ++i) {
      const Tensor& shard = g.params[i].shard().to_local();
      if (!(shard.device() == dev)) {
        staged.push_back(shard.to(dev, stream));
        record_use(staged.back(), stream);
      } else {
        record_use(shard, stream);
      }
      in.push_back(kernels::view_of(shard.device() == dev ? shard : staged.back()));
      padded.push_back(g.layout.params[i].padded_numel);
    }
    kernels::chunk_cat(in, slot + run.byte_offset, run.dtype, padded, dev, stream);
  }
}

Issued FlatPath::start_gather() {
  const GroupLayout& L = g_.layout;
  const Stream ag = g_.streams.all_gather;
  gathered_ = comm_buffer(L.shard_size * L.slot_bytes, g_.device);
  record_use(gathered_, ag);
  uint8_t* slot = static_cast<uint8_t*>(gathered_.data_ptr()) + g_.shard_comm->rank() * L.slot_bytes;
  copy_shards_into_slot(g_, slot, ag);
  return {g_.shard_comm->all_gather(slot, gathered_.data_ptr(), L.slot_bytes, DType::u8, g_.device, ag), L.slot_bytes};
}

void FlatPath::keep_share() {
  // Keep slots [j*S/k, (j+1)*S/k) of the gathered layout, j = this rank's index among its k ranks.
  const GroupLayout& L = g_.layout;
  const int64_t per = L.shard_size / g_.post_forward_comm->size();
  const int64_t first = g_.post_forward_comm->rank() * per;
  {
    MemoryKindScope kind(MemoryKind::kUnshardedParameters);
    kept_ = Tensor::empty({per * L.slot_bytes}, DType::u8, g_.device);
  }
  for (int64_t t = 0; t < per; ++t) {
    for (const SlotRun& run : L.runs) {
      std::vector<kernels::StridedView> in;
      std::vector<int64_t> padded;
      run_rows(g_, run, first + t, in, padded);
      kernels::chunk_cat(in, static_cast<uint8_t*>(kept_.data_ptr()) + t * L.slot_bytes + run.byte_offset, run.dtype,
                         padded, g_.device);
    }
  }
}

Issued FlatPath::start_gather_share() {
  const GroupLayout& L = g_.layout;
  const Stream ag = g_.streams.all_gather;
  gathered_ = comm_buffer(L.shard_size * L.slot_bytes, g_.device);
  record_use(gathered_, ag);
  // This rank kept S/k slots: gathering them over its k ranks restores all S slots in order.
  const int64_t share = int64_t(kept_.numel());
  record_use(kept_, ag);
  return {g_.post_forward_comm->all_gather(kept_.data_ptr(), gathered_.data_ptr(), share, DType::u8, g_.device, ag),
          share};
}

void FlatPath::finish_gather() {
  kept_ = Tensor();
  // Copy-out: rank r's rows of parameter i sit at the start of its region in slot r.
  const GroupLayout& L = g_.layout;
  for (Param& p : g_.params) p.allocate_unsharded();
  for (int64_t r = 0; r < L.shard_size; ++r) {
    for (const SlotRun& run : L.runs) {
      std::vector<kernels::StridedView> out;
      std::vector<int64_t> padded;
      run_rows(g_, run, r, out, padded);
      kernels::split_copy(static_cast<const uint8_t*>(gathered_.data_ptr()) + r * L.slot_bytes + run.byte_offset,
                          run.dtype, padded, out, g_.device);
    }
  }
  gathered_ = Tensor();
}

Issued FlatPath::start_reduce(size_t c, const Tensor& out, ReduceOp op) {
  const GroupLayout& L = g_.layout;
  const ReduceClass& rc = L.reduce_classes[c];
  const int64_t S = L.shard_size;
  const Device dev = g_.device;
  const Stream rs = g_.streams.reduce_scatter;
  if (reduce_in_.size() != L.reduce_classes.size()) reduce_in_.resize(L.reduce_classes.size());
  Tensor in;
  {
    MemoryKindScope kind(MemoryKind::kCommBuffers);
    in = Tensor::empty({S * rc.slot_numel}, rc.dtype, dev);
  }
  // Copy-in: slot r holds every parameter's rows of rank r, padded; a parameter without a gradient gives zeros.
  std::vector<Tensor> sources;  // per member: the flat unsharded gradient
  for (size_t i : rc.members) {
    const Param& p = g_.params[i];
    sources.push_back(p.has_grad() ? p.grad().to_local().contiguous().view({-1})
                                   : Tensor::zeros({p.layout().unsharded_numel()}, rc.dtype, dev));
  }
  // After the gradients' producers on the caller's stream (Note [FSDP streams]).
  Event::record(dev, Stream{}).block(rs);
  record_use(in, rs);
  for (const Tensor& t : sources) record_use(t, rs);
  for (int64_t r = 0; r < S; ++r) {
    std::vector<kernels::StridedView> views;
    std::vector<int64_t> padded;
    for (size_t k = 0; k < rc.members.size(); ++k) {
      const Param& p = g_.params[rc.members[k]];
      views.push_back(kernels::view_of(p.rows_of(sources[k], r)));
      padded.push_back(p.layout().reduce_padded_numel);
    }
    kernels::chunk_cat(views, static_cast<uint8_t*>(in.data_ptr()) + r * rc.slot_numel * int64_t(dtype_size(rc.dtype)),
                       rc.dtype, padded, dev, rs);
  }
  if (L.pre_divide != 1) {
    Tensor scaled = kernels::mul_scalar(in, 1.0 / L.pre_divide, rs);
    record_use(scaled, rs);
    in.copy_(scaled, rs);
  }
  record_use(out, rs);
  Issued issued{g_.shard_comm->reduce_scatter(in.data_ptr(), out.data_ptr(), rc.slot_numel, rc.dtype, op, dev, rs),
                S * rc.slot_numel * int64_t(dtype_size(rc.dtype))};
  reduce_in_[c] = in;
  return issued;
}

void FlatPath::finish_reduce(size_t c) {
  if (c < reduce_in_.size()) reduce_in_[c] = Tensor();
}

}  // namespace dt::fsdp
