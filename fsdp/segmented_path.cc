// The segmented data path (fsdp/segmented_path.h).
#include "fsdp/segmented_path.h"

#include <algorithm>

#include "collectives/segment_walk.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "fsdp/flat_path.h"

namespace dt::fsdp {

// Note [Gathering into the parameters]
// On a host, copy-in and copy-out each move as many bytes as the collective: the all-gather's two and the
// reduce-scatter's copy-in were 15 % of a rank's samples in a 2-process FSDP step of the MLP benchmark at batch 2
// (perf: split_copy, chunk_cat). When the shard communicator takes segmented blocks (Note [Segmented blocks] in
// collectives/communicator.h; UCX and threads on the CPU) the group's collectives take the rows where they lie:
//   - unshard: all_gather_segments. This rank's block is its shards, each at its region of the slot (the shards
//     themselves when they are already param_dtype on the group's device, else one slot staged by copy-in), and
//     rank r's block lands with every parameter's rows of r at their place in the parameter's storage, which is
//     sized at unshard: the padding never reaches a parameter, and no copy-out runs.
//   - reduce_grads: reduce_scatter_segments. Block r is every member's gradient rows of r (a member without a
//     gradient: an empty segment, read as zeros); the output is the flat shard buffer as before. The gradients stay
//     alive until wait_for_reduce. A pre-division (f16) scales a flat copy, so it keeps copy-in.
// Between processes of one host both read the peers' memory directly (process_vm_readv). The shards and the
// gradients must stay unchanged until the wait (the engine's own calls keep to that: reshard, the next unshard and
// the next reduction wait first). The post-forward share (reshard_after_forward = k) keeps the flat path.
//
// Note [A shard group of one]
// With one member (a process of its own, a mesh dim of size 1) the gather is this rank's shards copied to their
// places in the parameters, and the reduction its gradient rows copied into the shard buffer (the sum or average of
// one block is that block): both are done here, as the communicator's call would do them, without building its
// segment lists, its op and its work (about 1 us a call; dtensor.torch's 1-process tiny blocks make three a step).
// No collective is issued, so none is recorded; the bytes are counted as before.
bool SegmentedPath::admits(const GroupData& g, Direction d) {
  return g.shard_comm->supports_segments(g.device) && (d == Direction::kGather || g.layout.pre_divide == 1);
}

SegmentedPath::SegmentedPath(GroupData& g) : DataPath(g) {
  for (const ParamLayout& p : g.layout.params) block_offset_.push_back(p.slot_byte_offset);
  block_bytes_ = g.layout.slot_bytes;
}

bool SegmentedPath::alone() const { return g_.layout.shard_size == 1 && g_.device.is_cpu(); }

bool SegmentedPath::shards_are_the_slot() const {
  for (const Param& p : g_.params) {
    const Tensor& shard = p.shard().to_local();
    if (!(shard.device() == g_.device) || shard.dtype() != p.layout().param_dtype || !shard.is_contiguous())
      return false;
  }
  return true;
}

SegmentedPath::GatherSegments SegmentedPath::gather_segments() {
  const int64_t S = g_.layout.shard_size;
  for (Param& p : g_.params) p.allocate_unsharded();
  GatherSegments s;
  s.send.reserve(g_.params.size());
  if (shards_are_the_slot()) {
    for (size_t i = 0; i < g_.params.size(); ++i) {
      if (g_.params[i].mapped()) continue;  // Note [Gathering by mapping]
      const Tensor& shard = g_.params[i].shard().to_local();
      s.send.push_back(Segment{block_offset_[i], int64_t(shard.nbytes()), shard.data_ptr()});
    }
  } else {
    DT_ASSERT(std::none_of(g_.params.begin(), g_.params.end(), [](const Param& p) { return p.mapped(); }),
              "fsdp: group ", g_.name, " maps shards that are not its all-gather slot");
    {
      MemoryKindScope kind(MemoryKind::kCommBuffers);
      staged_ = Tensor::empty({g_.layout.slot_bytes}, DType::u8, g_.device);
    }
    copy_shards_into_slot(g_, static_cast<uint8_t*>(staged_.data_ptr()), g_.streams.all_gather);
    s.send.push_back(Segment{0, g_.layout.slot_bytes, staged_.data_ptr()});
  }
  s.recv.resize(size_t(S));
  for (int64_t r = 0; r < S; ++r) {
    s.recv[size_t(r)].reserve(g_.params.size());
    for (size_t i = 0; i < g_.params.size(); ++i) {
      const Param& p = g_.params[i];
      if (p.mapped()) continue;
      s.recv[size_t(r)].push_back(p.rows_segment(r, block_offset_[i], p.unsharded_data(), p.layout().param_dtype));
    }
  }
  return s;
}

Issued SegmentedPath::issue_gather(GatherSegments s) {
  int64_t sent = 0;  // what travels: the mapped parameters do not
  for (const Segment& g : s.send) sent += g.bytes;
  if (alone()) {  // Note [A shard group of one]
    copy_segments(s.send.data(), int64_t(s.send.size()), s.recv[0].data(), int64_t(s.recv[0].size()));
    return {completed_work("local gather"), sent};
  }
  return {g_.shard_comm->all_gather_segments(std::move(s.send), block_bytes_, std::move(s.recv), g_.device), sent};
}

Issued SegmentedPath::start_gather() { return issue_gather(gather_segments()); }

void SegmentedPath::finish_gather() { staged_ = Tensor(); }  // gathered straight into the parameters

Issued SegmentedPath::start_reduce(size_t c, const Tensor& out, ReduceOp op) {
  // Note [Gathering into the parameters], the reduction's half: block r is every member's rows of r, read where
  // the gradients lie (a member without a gradient: an empty segment, read as zeros).
  const GroupLayout& L = g_.layout;
  const ReduceClass& rc = L.reduce_classes[c];
  const int64_t S = L.shard_size;
  const int64_t es = int64_t(dtype_size(rc.dtype));
  if (sources_.size() != L.reduce_classes.size()) sources_.resize(L.reduce_classes.size());
  std::vector<std::vector<Segment>> send(static_cast<size_t>(S));
  for (auto& block : send) block.reserve(rc.members.size());
  int64_t offset = 0;
  for (size_t i : rc.members) {
    const Param& p = g_.params[i];
    void* data = nullptr;
    if (p.has_grad()) {  // kept alive until finish_reduce
      const Tensor& grad = p.grad().to_local();
      if (grad.is_contiguous()) {
        sources_[c].push_back(grad.storage());
        data = grad.data_ptr();
      } else {
        const Tensor copy = grad.contiguous();
        sources_[c].push_back(copy.storage());
        data = copy.data_ptr();
      }
    }
    for (int64_t r = 0; r < S; ++r) send[size_t(r)].push_back(p.rows_segment(r, offset * es, data, rc.dtype));
    offset += p.layout().reduce_padded_numel;
  }
  if (alone()) {  // Note [A shard group of one]
    const Segment whole{0, rc.slot_numel * es, out.data_ptr()};
    copy_segments(send[0].data(), int64_t(send[0].size()), &whole, 1);
    sources_[c].clear();  // copied: the gradients need not outlive this call
    return {completed_work("local reduce"), rc.slot_numel * es};
  }
  return {
      g_.shard_comm->reduce_scatter_segments(std::move(send), out.data_ptr(), rc.slot_numel, rc.dtype, op, g_.device),
      S * rc.slot_numel * es};
}

void SegmentedPath::finish_reduce(size_t c) {
  if (c < sources_.size()) sources_[c].clear();
}

}  // namespace dt::fsdp
