// Dynamic loss scaling (train/loss_scaler.h, Note [A skipped step is skipped everywhere]).
#include "train/loss_scaler.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "dtensor/ops/inplace.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"
#include "nn/ops.h"

namespace dt::train {

LossScaler::LossScaler(LossScalerOptions o) : o_(o), scale_(o.init_scale) {
  DT_CHECK_ARG(o_.init_scale > 0 && o_.growth_factor >= 1 && o_.backoff_factor > 0 && o_.backoff_factor < 1 &&
                   o_.growth_interval >= 1,
               "LossScaler: init_scale ", o_.init_scale, ", growth_factor ", o_.growth_factor, ", backoff_factor ",
               o_.backoff_factor, " and growth_interval ", o_.growth_interval,
               " must be > 0, >= 1, in (0, 1) and >= 1");
  if (!o_.enabled) scale_ = 1.0;
}

nn::Variable LossScaler::scale(const nn::Variable& loss) const { return o_.enabled ? nn::mul(loss, scale_) : loss; }

bool LossScaler::unscale(const std::vector<nn::Variable>& params) {
  DT_CHECK_ARG(!params.empty() && params[0].defined(), "LossScaler::unscale: no parameters");
  const double inv = o_.enabled ? 1.0 / scale_ : 1.0;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t first_bad = kNone;
  for (size_t i = 0; i < params.size(); ++i) {
    DTensor g = params[i].grad();
    if (!g.defined() || !g.mesh().is_member() || g.to_local().numel() == 0) continue;
    if (inv != 1.0) dt::mul_(g, inv);
    if (first_bad != kNone) continue;
    const Tensor peak = kernels::amax(kernels::unary(kernels::UnaryOp::kAbs, g.to_local(), 0)).to(DType::f64);
    if (!std::isfinite(peak.to(Device::cpu()).item())) first_bad = int64_t(i);
  }
  // One all-reduce over the world: the lowest (parameter, rank) that found a non-finite gradient, on every rank.
  const DTensor& p0 = params[0].data();
  const CommunicatorPtr& world = p0.mesh().world();
  const int64_t n = world->size(), rank = world->rank();
  const int64_t code = first_bad == kNone ? kNone : first_bad * n + rank;
  Tensor flag = Tensor::from_data(std::vector<int64_t>{code}, {1}).to(p0.to_local().device());
  world->all_reduce(flag, ReduceOp::kMin)->wait();
  const int64_t got = flag.to(Device::cpu()).data<int64_t>()[0];
  last_found_ = got != kNone;
  found_.reset();
  if (last_found_) {
    const nn::Variable& bad = params[size_t(got / n)];
    found_ = (bad.name().empty() ? "parameter " + std::to_string(got / n) : bad.name()) + " on rank " +
             std::to_string(got % n);
  }
  return !last_found_;
}

void LossScaler::update() {
  if (last_found_) {
    ++skipped_;
    clean_ = 0;
    if (o_.enabled) scale_ *= o_.backoff_factor;
  } else if (++clean_ >= o_.growth_interval) {
    clean_ = 0;
    if (o_.enabled) scale_ *= o_.growth_factor;
  }
  last_found_ = false;
}

void LossScaler::load_state(double scale, int64_t growth_tracker) {
  DT_CHECK_ARG(scale > 0 && growth_tracker >= 0, "LossScaler::load_state: scale ", scale, " and growth tracker ",
               growth_tracker, " must be positive and non-negative");
  scale_ = scale;
  clean_ = growth_tracker;
}

}  // namespace dt::train
