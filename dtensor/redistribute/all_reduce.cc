// P(op) -> R along one mesh dim: one out-of-place all-reduce (the input stays untouched, nothing else is copied).
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool AllReduceTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kAllReduce; }

PendingStep AllReduceTransition::start(const StepContext& c) const {
  const Tensor& in = c.input;
  Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
  ReduceOp op = std::get<Partial>(c.step.from).op;
  WorkPtr work = c.comm()->all_reduce(in.numel() ? in.data_ptr() : nullptr, out.numel() ? out.data_ptr() : nullptr,
                                      in.numel(), in.dtype(), op, in.device());
  return {work, {}, std::move(out)};  // the plan's runner keeps the input alive
}

}  // namespace dt::redistribute
