// R -> P(op) along one mesh dim, exact: partial_local_value (transition.h).
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

bool LocalPartialTransition::is_suitable(const PlanStep& step) const { return step.kind == StepKind::kLocalPartial; }

PendingStep LocalPartialTransition::start(const StepContext& c) const {
  return {nullptr, {}, partial_local_value(c.input, std::get<Partial>(c.step.to).op, c.my_index())};
}

}  // namespace dt::redistribute
