// R -> S(d) along one mesh dim: keep chunk i of the local block along d (no communication).
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool LocalSliceTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kLocalSlice; }

PendingStep LocalSliceTransition::start(const StepContext& c) const {
  const int64_t d = c.step.to_tensor_dim, me = c.my_index();
  const std::vector<int64_t> sizes = c.member_sizes_after(d);
  int64_t off = 0;
  for (int64_t i = 0; i < me; ++i) off += sizes[size_t(i)];
  // Own the block (a copy, not a view): later in-place updates of either tensor stay separate.
  const Tensor mine = c.input.narrow(d, off, sizes[size_t(me)]);
  Tensor out = Tensor::empty(mine.shape(), c.input.dtype(), c.input.device());
  out.copy_(mine);
  return {nullptr, {}, std::move(out)};
}

}  // namespace dt::redistribute
