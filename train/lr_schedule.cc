// Learning-rate schedules (train/lr_schedule.h).
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dt::train {

double LrSchedule::lr_at(int64_t step) const {
  DT_CHECK_ARG(step >= 0 && warmup_steps >= 0 && total_steps >= 1 && decay_steps >= 0, "LrSchedule: step ", step,
               ", warmup_steps ", warmup_steps, ", total_steps ", total_steps, " and decay_steps ", decay_steps,
               " must be >= 0 (total_steps >= 1)");
  if (warmup_steps > 0 && step < warmup_steps) return base_lr * double(step + 1) / double(warmup_steps);
  auto fraction = [](int64_t done, int64_t span) {
    return std::clamp(double(done) / double(std::max<int64_t>(1, span)), 0.0, 1.0);
  };
  switch (kind) {
    case Kind::kConstant:
      return base_lr;
    case Kind::kWarmupCosine: {
      const double t = fraction(step - warmup_steps, total_steps - warmup_steps);
      return min_lr + 0.5 * (base_lr - min_lr) * (1 + std::cos(std::numbers::pi * t));
    }
    case Kind::kLinear:
      return base_lr + (min_lr - base_lr) * fraction(step - warmup_steps, total_steps - warmup_steps);
    case Kind::kWarmupStableDecay: {
      const int64_t decay_start = std::max(warmup_steps, total_steps - decay_steps);
      if (step < decay_start) return base_lr;
      return base_lr + (min_lr - base_lr) * fraction(step - decay_start, total_steps - decay_start);
    }
  }
  return base_lr;
}

LrSchedule::Kind LrSchedule::kind_from_name(const std::string& name) {
  if (name == "constant") return Kind::kConstant;
  if (name == "cosine") return Kind::kWarmupCosine;
  if (name == "linear") return Kind::kLinear;
  if (name == "wsd") return Kind::kWarmupStableDecay;
  DT_THROW(InvalidArgument, "lr schedule '", name, "' is not one of constant, cosine, linear, wsd");
}

}  // namespace dt::train
