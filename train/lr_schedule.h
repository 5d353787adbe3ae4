// Learning-rate schedules: the lr of step k (from 0) as a pure function of k, so a resumed run continues exactly.
//
//   train::LrSchedule s{.kind = train::LrSchedule::Kind::kWarmupCosine, .base_lr = 3e-4, .warmup_steps = 100,
//                       .total_steps = 5000, .min_lr = 3e-5};
//   opt.set_lr(s.lr_at(step));
//
// Every schedule warms up linearly over warmup_steps (lr (k + 1) / warmup * base_lr: the first step is not lr 0),
// then:
//   kConstant        base_lr
//   kWarmupCosine    cosine from base_lr to min_lr at total_steps (min_lr after)
//   kLinear          linear from base_lr to min_lr at total_steps
//   kWarmupStableDecay  base_lr until total_steps - decay_steps, then linear to min_lr at total_steps (WSD, as
//                    MiniCPM and torchtitan's "wsd" schedule)
#pragma once

#include <cstdint>
#include <string>

namespace dt::train {

struct LrSchedule {
  enum class Kind { kConstant, kWarmupCosine, kLinear, kWarmupStableDecay };
  Kind kind = Kind::kWarmupCosine;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr = 0;
  int64_t decay_steps = 0;  // kWarmupStableDecay: the steps of the final decay
  double lr_at(int64_t step) const;
  // "constant", "cosine", "linear", "wsd" (InvalidArgument naming the accepted names otherwise).
  static Kind kind_from_name(const std::string& name);
};

}  // namespace dt::train
