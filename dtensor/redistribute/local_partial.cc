// R -> P(op) along one mesh dim, exact (never a division): sum: coordinate 0 keeps the value, the others hold
// zeros; product: the others hold ones; avg, max, min: every coordinate keeps the value (shared, not copied).
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool LocalPartialTransition::is_suitable(const PlanStep& step) const {
  return step.kind == StepKind::kLocalPartial;
}

PendingStep LocalPartialTransition::start(const StepContext& c) const {
  ReduceOp op = std::get<Partial>(c.step.to).op;
  Tensor out = c.input;
  if (c.my_index() != 0 && (op == ReduceOp::kSum || op == ReduceOp::kProduct))
    out = Tensor::full(c.input.shape(), op == ReduceOp::kSum ? 0.0 : 1.0, c.input.dtype(), c.input.device());
  return {nullptr, {}, std::move(out)};
}

}  // namespace dt::redistribute
