// S(i) -> S(j) along one mesh dim: a padded all-to-all. Member p holds chunk p of i (size a_p) and j's whole
// range; afterwards member q holds chunk q of j (size b_q) and i's whole range. Every block is padded to
// (max a) x (max b) so that one equal-count all-to-all moves them; padding is dropped on unpack.
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool AllToAllTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kAllToAll; }

PendingStep AllToAllTransition::start(const StepContext& c) const {
  const int64_t i = c.step.from_tensor_dim, j = c.step.to_tensor_dim, k = c.group_size(), me = c.my_index();
  const Tensor& in = c.input;
  std::vector<int64_t> a(static_cast<size_t>(k)), b(a), a_off(a), b_off(a);
  for (int64_t p = 0; p < k; ++p) {
    a[size_t(p)] = c.member_shape_before(p)[size_t(i)];
    b[size_t(p)] = c.member_shape_after(p)[size_t(j)];
    a_off[size_t(p)] = p ? a_off[size_t(p - 1)] + a[size_t(p - 1)] : 0;
    b_off[size_t(p)] = p ? b_off[size_t(p - 1)] + b[size_t(p - 1)] : 0;
  }
  Shape block = in.shape();
  block[size_t(i)] = a[0];
  block[size_t(j)] = b[0];
  Shape buf_shape{k};
  buf_shape.insert(buf_shape.end(), block.begin(), block.end());
  Tensor send = Tensor::empty(buf_shape, in.dtype(), in.device());
  for (int64_t q = 0; q < k; ++q)
    copy_into(send.select(0, q).narrow(i, 0, a[size_t(me)]).narrow(j, 0, b[size_t(q)]),
              in.narrow(j, b_off[size_t(q)], b[size_t(q)]));
  Tensor recv = Tensor::empty(buf_shape, in.dtype(), in.device());
  WorkPtr work = c.comm()->all_to_all(send, recv);
  Shape out_shape = c.output_shape();
  auto finish = [send, recv, out_shape, a, a_off, b, i, j, k, me]() -> Tensor {
    Tensor out = Tensor::empty(out_shape, recv.dtype(), recv.device());
    for (int64_t p = 0; p < k; ++p)
      copy_into(out.narrow(i, a_off[size_t(p)], a[size_t(p)]),
                recv.select(0, p).narrow(i, 0, a[size_t(p)]).narrow(j, 0, b[size_t(me)]));
    return out;
  };
  return {work, finish};
}

}  // namespace dt::redistribute
