// Every redistribution transition, in priority order: the first suitable one executes a step.
#include "core/error.h"
#include "dtensor/redistribute/transitions.h"

namespace dt::redistribute {

const std::vector<std::unique_ptr<Transition>>& transitions() {
  static const auto* list = [] {
    auto* v = new std::vector<std::unique_ptr<Transition>>();
    v->push_back(std::make_unique<AllGatherTransition>());
    v->push_back(std::make_unique<AllReduceTransition>());
    v->push_back(std::make_unique<ReduceScatterTransition>());
    v->push_back(std::make_unique<AllToAllTransition>());
    v->push_back(std::make_unique<LocalSliceTransition>());
    v->push_back(std::make_unique<LocalPartialTransition>());
    return v;
  }();
  return *list;
}

const Transition& find_transition(const PlanStep& step) {
  for (const auto& t : transitions())
    if (t->is_suitable(step)) return *t;
  DT_THROW(InternalError, "no redistribution transition executes step ", step.to_string());
}

const CrossMeshTransition& cross_mesh_transition() {
  static const CrossMeshTransition transition;
  return transition;
}

Shape front_shape(const Shape& shape, int64_t d, int64_t size) {
  Shape out{size};
  for (int64_t i = 0; i < int64_t(shape.size()); ++i)
    if (i != d) out.push_back(shape[size_t(i)]);
  return out;
}

}  // namespace dt::redistribute
