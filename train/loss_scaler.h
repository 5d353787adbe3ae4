// Dynamic loss scaling for f16 training over shards, with the semantics of torch.amp.GradScaler and FSDP's
// ShardedGradScaler:
//
//   train::LossScaler scaler({.init_scale = 65536});
//   scaler.scale(loss).backward();
//   if (scaler.unscale(params)) {          // false: a gradient is inf or NaN on some rank; every rank skips
//     nn::clip_grad_norm_(params, 1.0);   // on the true gradients
//     opt.step();
//   }
//   scaler.update();                       // halve after a skip, double after growth_interval clean steps
//   opt.zero_grad();
//
// Note [A skipped step is skipped everywhere]
// unscale() divides every local gradient shard by the scale and checks it for inf and NaN; then one all-reduce over
// the world of the parameters (max of "found", min of the first bad parameter's index) tells every rank the same
// thing, so all ranks skip the same steps and the optimizer states never diverge. The report names the step's first
// non-finite parameter (in `params` order) and the lowest rank that found it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/variable.h"

namespace dt::train {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, as GradScaler
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
  bool enabled = true;             // false: scale() is the identity and unscale() only checks
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});
  // loss * scale (differentiable).
  nn::Variable scale(const nn::Variable& loss) const;
  // Divides every gradient of `params` by the scale and reports whether the step may be taken: false when any
  // gradient of any rank is inf or NaN (then found() names it). Collective over the parameters' world; every rank
  // passes the same parameters in the same order. Parameters without a gradient are skipped.
  bool unscale(const std::vector<nn::Variable>& params);
  // After the step (taken or not): backoff when the last unscale() found a non-finite gradient, growth after
  // growth_interval clean steps in a row.
  void update();
  double current_scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }
  // The last unscale()'s finding: "<parameter name> on rank <r>", or nullopt when every gradient was finite.
  const std::optional<std::string>& found() const { return found_; }
  // For checkpoints: the scale and the count of clean steps since the last change.
  int64_t growth_tracker() const { return clean_; }
  void load_state(double scale, int64_t growth_tracker);

 private:
  LossScalerOptions o_;
  double scale_;
  int64_t clean_ = 0, skipped_ = 0;
  bool last_found_ = false;
  std::optional<std::string> found_;
};

}  // namespace dt::train
