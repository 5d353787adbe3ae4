// S(d) -> R along one mesh dim: a padded all-gather.
//
// Note [gather into the output]
// torch.chunk's sizes along a group are (c, ..., c, r, 0, ..., 0) with c = ceil(n/k): every non-empty chunk but
// the last is full. So when d leads the memory order (all earlier dims have size 1), member i's chunk starts at
// i*c in the padded gather buffer exactly where it starts in the result, and the result is a prefix of the buffer:
// the all-gather writes straight into the output, uneven or not. Otherwise, when the communicator takes strided views
// (Note [Strided views] in collectives/communicator.h), every member's block goes straight into its slice of the
// output along d, unpadded; else every member's (padded) block is gathered as it lies in memory and copied into its
// slice of the output: contiguous row copies, never a transpose.
#include "core/error.h"
#include "dtensor/redistribute/transitions.h"
#include "kernels/strided_view.h"

namespace dt::redistribute {

bool AllGatherTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kAllGather; }

PendingStep AllGatherTransition::start(const StepContext& c) const {
  const int64_t d = c.step.from_tensor_dim, k = c.group_size();
  const Tensor& in = c.input;
  const std::vector<int64_t> sizes = c.member_sizes_before(d);
  const int64_t chunk = sizes[0];
  DT_ASSERT(in.size(d) == sizes[size_t(c.my_index())], "local block does not match the layout");
  // The group's blocks are consecutive ranges along d: the output is the input with d widened to their sum.
  Shape out_shape = in.shape();
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  out_shape[size_t(d)] = total;

  const bool direct = leading_dims_trivial(in.shape(), d);
  if (direct && total == chunk * k) {  // Note [gather into the output], every block full: no padding at all
    Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
    WorkPtr work = c.comm()->all_gather(in, out);
    return {work, {}, std::move(out)};
  }
  if (!direct && c.comm()->supports_views(in.device())) {
    Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
    WorkPtr work = c.comm()->all_gather_views(kernels::view_of(in), slice_views(out, d, sizes), in.device());
    return {work, {}, std::move(out)};
  }

  Shape block = in.shape();  // every member's block padded to the chunk size along d
  block[size_t(d)] = chunk;
  Shape recv_shape{k};
  recv_shape.insert(recv_shape.end(), block.begin(), block.end());
  Tensor send = in;
  if (in.size(d) != chunk) {
    send = Tensor::empty(block, in.dtype(), in.device());
    send.narrow(d, 0, in.size(d)).copy_(in);
  }
  Tensor recv = Tensor::empty(recv_shape, in.dtype(), in.device());
  WorkPtr work = c.comm()->all_gather(send, recv);
  // The input outlives the step (the plan's runner holds it); a padded copy must be kept alive here.
  auto finish = [send = in.size(d) != chunk ? send : Tensor(), recv, sizes, out_shape, d, k, chunk,
                 direct]() -> Tensor {
    if (direct) {  // Note [gather into the output]
      Shape flat = front_shape(out_shape, d, chunk * k);
      return recv.view(flat).narrow(0, 0, out_shape[size_t(d)]).view(out_shape);
    }
    // Blocks are whole rows of the output's memory order along d: copy them into place (row copies, no transpose).
    Tensor out = Tensor::empty(out_shape, recv.dtype(), recv.device());
    int64_t off = 0;
    for (int64_t i = 0; i < k; ++i) {
      out.narrow(d, off, sizes[size_t(i)]).copy_(recv.select(0, i).narrow(d, 0, sizes[size_t(i)]));
      off += sizes[size_t(i)];
    }
    return out;
  };
  return {work, finish, {}};
}

}  // namespace dt::redistribute
