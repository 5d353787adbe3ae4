// P(op) -> S(d) along one mesh dim: a padded reduce-scatter. The input (d's whole current range) is laid out with d
// first and padded to k equal chunks; member i keeps the first size_i rows of its reduced chunk. When d leads the
// memory order and the chunks are even, the input is sent as is; the output is a prefix view of the received chunk
// in that case too (Note [gather into the output] in all_gather.cc, mirrored).
#include "core/error.h"
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool ReduceScatterTransition::is_suitable(const PlanStep& step) const {
  return step.kind == StepKind::kReduceScatter;
}

PendingStep ReduceScatterTransition::start(const StepContext& c) const {
  const int64_t d = c.step.to_tensor_dim, k = c.group_size(), me = c.my_index();
  const Tensor& in = c.input;
  const Shape out_shape = c.output_shape();
  std::vector<int64_t> sizes(static_cast<size_t>(k));
  int64_t total = 0;
  for (int64_t i = 0; i < k; ++i) total += sizes[size_t(i)] = c.member_shape_after(i)[size_t(d)];
  DT_ASSERT(total == in.size(d), "reduce_scatter input does not cover the chunks");
  const int64_t chunk = sizes[0];
  ReduceOp op = std::get<Partial>(c.step.from).op;

  const bool direct = leading_dims_trivial(in.shape(), d);
  Tensor send;
  if (direct && total == chunk * k) {
    send = in.view(front_shape(in.shape(), d, total));
  } else {
    // Rows past `total` are padding: reduced like the rest and dropped, never visible.
    send = Tensor::empty(front_shape(in.shape(), d, chunk * k), in.dtype(), in.device());
    copy_into(send.narrow(0, 0, total), dim_to_front(in, d));
    send.narrow(0, total, chunk * k - total).zero_();
  }
  Tensor recv = Tensor::empty(front_shape(in.shape(), d, chunk), in.dtype(), in.device());
  WorkPtr work = c.comm()->reduce_scatter(send, recv, op);
  const int64_t mine = sizes[size_t(me)];
  auto finish = [send, recv, out_shape, d, mine, direct]() -> Tensor {
    if (direct) return recv.narrow(0, 0, mine).view(out_shape);
    Tensor out = Tensor::empty(out_shape, recv.dtype(), recv.device());
    copy_into(dim_to_front(out, d), recv.narrow(0, 0, mine));
    return out;
  };
  return {work, finish};
}

}  // namespace dt::redistribute
