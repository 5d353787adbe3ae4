#include "dtensor/redistribute/executor.h"

#include "core/error.h"
#include "core/logging.h"
#include "core/trace.h"

namespace dt::redistribute {

PlanRun::PlanRun(const DeviceMesh& mesh, const Shape& global, const Plan& plan, const Tensor& input)
    : mesh_(mesh), global_(global), plan_(&plan), input_(&input) {
  if (!input.is_contiguous()) {
    current_ = input.contiguous();
    input_ = &current_;
  }
  if (trace::enabled()) traced_from_ = trace::now_ns();
  if (!plan_->steps.empty()) issue(0);
}

void PlanRun::issue(size_t i) {
  const PlanStep& step = plan_->steps[i];
  if (is_collective(step.kind) && mesh_.size(step.mesh_dim) == 1) {
    // A group of one: the collective is the identity (the local block does not change), so issue nothing.
    pending_ = PendingStep{nullptr, {}, *input_};
    has_pending_ = true;
    next_ = i + 1;
    return;
  }
  StepContext ctx{mesh_, global_, step, *input_};
  pending_ = find_transition(step).start(ctx);
  has_pending_ = true;
  next_ = i + 1;
}

bool PlanRun::in_flight_completed() const { return !has_pending_ || !pending_.work || pending_.work->is_completed(); }

PlanRun::~PlanRun() {
  if (!has_pending_) return;
  try {
    finish();
  } catch (const std::exception& e) {
    DT_LOG_WARN("a redistribution dropped before wait() failed: ", e.what());
  }
}

Tensor PlanRun::finish() {
  while (has_pending_) {
    // Off the run before waiting: a step whose wait throws is over (failed), and is not finished twice.
    PendingStep step = std::move(pending_);
    has_pending_ = false;
    if (step.work) step.work->wait();
    current_ = step.finish ? step.finish() : std::move(step.result);
    input_ = &current_;
    if (next_ < plan_->steps.size()) issue(next_);
  }
  if (traced_from_ != 0) {
    // From issue to finish, on a track of its own: a run may be in flight across the caller's other spans.
    static const int32_t track = trace::new_track("redistribute");
    trace::record(trace::Category::kRedistribute, "redistribute", traced_from_, trace::now_ns(), track,
                  trace::Args().str("shape", shape_str(global_)).str("plan", plan_->to_string()).take());
    traced_from_ = 0;
  }
  if (input_ != &current_) return *input_;  // no step ran: the input itself
  return std::move(current_);
}

Tensor run_plan(const DeviceMesh& mesh, const Shape& global, const Plan& plan, const Tensor& input) {
  return PlanRun(mesh, global, plan, input).finish();
}

}  // namespace dt::redistribute
