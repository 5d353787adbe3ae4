// S(i) -> S(j) along one mesh dim: one all-to-all(v) with exact (unpadded) counts. Member p holds chunk p of i
// (size a_p) and j's whole range; afterwards member q holds chunk q of j (size b_q) and i's whole range. The block
// for q is in.narrow(j, chunk q) and the block from p lands in out.narrow(i, chunk p). When the communicator takes
// strided views (Note [Strided views] in collectives/communicator.h) the blocks always move view to view with no
// staging; else each side is used in place when all its blocks are contiguous in memory (S(0)->S(1) receives straight
// into the output, S(1)->S(0) sends straight from the input) and otherwise packed into (or unpacked from) a staging
// buffer, one row copy.
#include "dtensor/redistribute/transitions.h"
#include "kernels/strided_view.h"

namespace dt::redistribute {

namespace {

struct Blocks {
  std::vector<Tensor> views;  // one per member, in member order
  std::vector<int64_t> counts, displs;
  bool in_place = true;  // every view is contiguous and lies in `base` at displs
};

// The views of `base` along `dim` at the given offsets and sizes, and whether they can be used in place.
Blocks blocks_of(const Tensor& base, int64_t dim, const std::vector<int64_t>& off, const std::vector<int64_t>& size) {
  Blocks b;
  int64_t packed = 0;
  for (size_t p = 0; p < off.size(); ++p) {
    Tensor v = base.narrow(dim, off[p], size[p]);
    b.counts.push_back(v.numel());
    if (!v.is_contiguous() && v.numel() > 0) b.in_place = false;
    b.displs.push_back(v.numel() ? v.offset() - base.offset() : 0);
    b.views.push_back(v);
    packed += v.numel();
  }
  if (!b.in_place) {  // staging layout: the blocks packed one after another
    packed = 0;
    for (size_t p = 0; p < off.size(); ++p) {
      b.displs[p] = packed;
      packed += b.counts[p];
    }
  }
  return b;
}

}  // namespace

bool AllToAllTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kAllToAll; }

PendingStep AllToAllTransition::start(const StepContext& c) const {
  const int64_t i = c.step.from_tensor_dim, j = c.step.to_tensor_dim, k = c.group_size();
  const Tensor& in = c.input;
  const std::vector<int64_t> a = c.member_sizes_before(i), b = c.member_sizes_after(j);
  // The output: dim i widened to the group's whole range, dim j narrowed to this member's chunk.
  Shape out_shape = in.shape();
  out_shape[size_t(i)] = 0;
  for (int64_t s : a) out_shape[size_t(i)] += s;
  out_shape[size_t(j)] = b[size_t(c.my_index())];
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  // Every member must take the same path: contiguity of the blocks differs per member (an empty or one-row shard is
  // contiguous where the others are not), so views are used whenever the communicator takes them.
  if (c.comm()->supports_views(in.device())) {
    WorkPtr work = c.comm()->all_to_all_views(slice_views(in, j, b), slice_views(out, i, a), in.device());
    return {work, {}, std::move(out)};  // the plan's runner keeps the input alive
  }
  std::vector<int64_t> a_off(a.size()), b_off(b.size());
  for (size_t p = 1; p < a.size(); ++p) {
    a_off[p] = a_off[p - 1] + a[p - 1];
    b_off[p] = b_off[p - 1] + b[p - 1];
  }
  Blocks send = blocks_of(in, j, b_off, b);
  Blocks recv = blocks_of(out, i, a_off, a);
  Tensor send_buf = in, recv_buf = out;
  if (!send.in_place) {
    send_buf = Tensor::empty({in.numel()}, in.dtype(), in.device());
    for (int64_t p = 0; p < k; ++p)
      send_buf.narrow(0, send.displs[size_t(p)], send.counts[size_t(p)])
          .view(send.views[size_t(p)].shape())
          .copy_(send.views[size_t(p)]);
  }
  if (!recv.in_place) recv_buf = Tensor::empty({out.numel()}, in.dtype(), in.device());
  WorkPtr work = c.comm()->all_to_allv(send_buf.numel() ? send_buf.data_ptr() : nullptr, send.counts, send.displs,
                                       recv_buf.numel() ? recv_buf.data_ptr() : nullptr, recv.counts, recv.displs,
                                       in.dtype(), in.device());
  auto finish = [send_buf, recv_buf, out, recv, k]() -> Tensor {
    if (!recv.in_place)
      for (int64_t p = 0; p < k; ++p) {
        Tensor dst = recv.views[size_t(p)];  // a handle: the captured views are const
        dst.copy_(recv_buf.narrow(0, recv.displs[size_t(p)], recv.counts[size_t(p)]).view(dst.shape()));
      }
    return out;
  };
  return {work, finish, {}};
}

}  // namespace dt::redistribute
