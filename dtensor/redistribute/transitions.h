// The transitions, one class each (one .cc each); registry.cc lists them in priority order.
#pragma once

#include "dtensor/redistribute/transition.h"

namespace dt::redistribute {

#define DT_TRANSITION_(Name, label)                           \
  class Name : public Transition {                            \
   public:                                                    \
    const char* name() const override { return label; }       \
    bool is_suitable(const PlanStep& step) const override;    \
    PendingStep start(const StepContext& ctx) const override; \
  };
DT_TRANSITION_(AllGatherTransition, "S->R all_gather")
DT_TRANSITION_(AllReduceTransition, "P->R all_reduce")
DT_TRANSITION_(ReduceScatterTransition, "P->S reduce_scatter")
DT_TRANSITION_(LocalSliceTransition, "R->S local slice")
DT_TRANSITION_(AllToAllTransition, "S->S all_to_all")
DT_TRANSITION_(LocalPartialTransition, "R->P local")
#undef DT_TRANSITION_

// The shape of `shape` with dim d moved to the front and resized to `size`.
Shape front_shape(const Shape& shape, int64_t d, int64_t size);

}  // namespace dt::redistribute
