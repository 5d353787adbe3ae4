// S(d) -> R along one mesh dim: a padded all-gather.
//
// Note [gather into the output]
// torch.chunk's sizes along a group are (c, ..., c, r, 0, ..., 0) with c = ceil(n/k): every non-empty chunk but
// the last is full. So when d leads the memory order (all earlier dims have size 1), member i's chunk starts at
// i*c in the padded gather buffer exactly where it starts in the result, and the result is a prefix of the buffer:
// the all-gather writes straight into the output, uneven or not. Otherwise the input is packed with d first and
// the received blocks are unpacked into place.
#include "core/error.h"
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool AllGatherTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kAllGather; }

PendingStep AllGatherTransition::start(const StepContext& c) const {
  const int64_t d = c.step.from_tensor_dim, k = c.group_size();
  const Tensor& in = c.input;
  const Shape out_shape = c.output_shape();
  std::vector<int64_t> sizes(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) sizes[size_t(i)] = c.member_shape_before(i)[size_t(d)];
  const int64_t chunk = sizes[0];
  DT_ASSERT(in.size(d) == sizes[size_t(c.my_index())], "local block does not match the layout");

  const bool direct = leading_dims_trivial(in.shape(), d);
  Tensor send;
  if (direct && in.size(d) == chunk) {
    send = in.view(front_shape(in.shape(), d, chunk));
  } else {
    send = Tensor::empty(front_shape(in.shape(), d, chunk), in.dtype(), in.device());
    copy_into(send.narrow(0, 0, in.size(d)), dim_to_front(in, d));
  }
  Tensor recv = Tensor::empty(front_shape(in.shape(), d, chunk * k), in.dtype(), in.device());
  WorkPtr work = c.comm()->all_gather(send, recv);
  auto finish = [send, recv, sizes, out_shape, d, k, chunk, direct]() -> Tensor {
    if (direct) return recv.narrow(0, 0, out_shape[size_t(d)]).view(out_shape);  // Note [gather into the output]
    Tensor out = Tensor::empty(out_shape, recv.dtype(), recv.device());
    Tensor out_front = dim_to_front(out, d);
    int64_t off = 0;
    for (int64_t i = 0; i < k; ++i) {
      copy_into(out_front.narrow(0, off, sizes[size_t(i)]), recv.narrow(0, i * chunk, sizes[size_t(i)]));
      off += sizes[size_t(i)];
    }
    return out;
  };
  return {work, finish};
}

}  // namespace dt::redistribute
