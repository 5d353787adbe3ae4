// P(op) -> S(d) along one mesh dim: a padded reduce-scatter. The input (d's whole current range) is cut into the k
// destination chunks along d, each padded to the chunk size (row copies, no transpose); member i keeps the first
// size_i rows of its reduced chunk. When d leads the memory order and the chunks are even, the input is sent as is
// and the output is a prefix view of the received chunk (Note [gather into the output] in all_gather.cc, mirrored).
#include "core/error.h"
#include "dtensor/redistribute/transitions.h"
#include "kernels/fill.h"

namespace dt::redistribute {

bool ReduceScatterTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kReduceScatter; }

PendingStep ReduceScatterTransition::start(const StepContext& c) const {
  const int64_t d = c.step.to_tensor_dim, k = c.group_size(), me = c.my_index();
  const Tensor& in = c.input;
  const std::vector<int64_t> sizes = c.member_sizes_after(d);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  DT_ASSERT(total == in.size(d), "reduce_scatter input does not cover the chunks");
  Shape out_shape = in.shape();  // the input with d narrowed to this member's chunk
  out_shape[size_t(d)] = sizes[size_t(me)];
  const int64_t chunk = sizes[0];
  ReduceOp op = std::get<Partial>(c.step.from).op;

  const bool direct = leading_dims_trivial(in.shape(), d);
  Shape block = in.shape();  // one destination's chunk, padded to the chunk size along d
  block[size_t(d)] = chunk;
  Tensor send;
  if (direct && total == chunk * k) {
    send = in;  // already k equal chunks in memory order
  } else {
    // Rows past a chunk's size are padding: reduced like the rest and dropped, never visible.
    Shape send_shape{k};
    send_shape.insert(send_shape.end(), block.begin(), block.end());
    send = Tensor::empty(send_shape, in.dtype(), in.device());
    int64_t off = 0;
    for (int64_t i = 0; i < k; ++i) {
      Tensor dst = send.select(0, i);
      dst.narrow(d, 0, sizes[size_t(i)]).copy_(in.narrow(d, off, sizes[size_t(i)]));
      Tensor pad = dst.narrow(d, sizes[size_t(i)], chunk - sizes[size_t(i)]);
      if (pad.numel()) kernels::fill(pad, kernels::Scalar(0.0));
      off += sizes[size_t(i)];
    }
  }
  Tensor recv = Tensor::empty(block, in.dtype(), in.device());
  WorkPtr work = c.comm()->reduce_scatter(send.view({send.numel()}), recv, op);
  const int64_t mine = sizes[size_t(me)];
  // The input outlives the step (the plan's runner holds it); a padded copy must be kept alive here.
  auto finish = [send = send.data_ptr() == in.data_ptr() ? Tensor() : send, recv, out_shape, d, mine, chunk,
                 direct]() -> Tensor {
    if (mine == chunk) return recv;
    if (direct) return recv.narrow(d, 0, mine);  // a prefix of the chunk's memory: contiguous, no copy
    Tensor out = Tensor::empty(out_shape, recv.dtype(), recv.device());
    out.copy_(recv.narrow(d, 0, mine));
    return out;
  };
  return {work, finish, {}};
}

}  // namespace dt::redistribute
