// train::LossScaler (Note [A skipped step is skipped everywhere]) on the thread backend: a tensor-parallel Linear on
// 2 ranks and an FSDP-style sharded parameter on 3 (an empty shard included). An inf or NaN injected into one
// rank's gradient shard at chosen steps makes every rank skip exactly those steps, names the parameter and the rank,
// and halves the scale; clean steps unscale the gradients exactly and grow the scale every growth_interval steps.
#include "train/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "nn/autograd.h"
#include "nn/layers.h"
#include "nn/parallel.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt::train {
namespace {

TEST(LossScaler, SkipsExactlyTheStepsWithANonFiniteGradientOnEveryRank) {
  for (int64_t ranks : {2, 3}) {
    op_test::Failures f;
    op_test::on_mesh({ranks}, [&](const DeviceMesh& mesh) {
      auto layer = std::make_shared<nn::Linear>(4, 5, true);  // out 5: shards 3/2 on 2 ranks, 2/2/1 on 3
      nn::parallelize_module(layer, mesh, nn::ColwiseParallel());
      layer->materialize(mesh, 3);
      const std::vector<nn::Variable> params = layer->parameters();
      LossScaler scaler(
          {.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3, .enabled = true});
      const std::set<int64_t> bad_steps = {2, 3, 7};
      const int64_t bad_rank = ranks - 1;
      std::vector<bool> taken;
      for (int64_t step = 0; step < 10; ++step) {
        const nn::Variable x(as_replicate(Tensor::randn({2, 4}, uint64_t(step)), mesh));
        nn::Variable loss = nn::sum((*layer)(x));
        scaler.scale(loss).backward();
        // The expected unscaled gradient of the weight: this rank's rows of the unscaled sum's gradient.
        const Tensor want = Tensor(params[0].grad().to_local().clone()).to(DType::f64);
        if (bad_steps.count(step) && mesh.global_rank() == bad_rank) {
          Tensor g = params[1].grad().to_local();  // the bias: the last rank holds a non-empty shard of it
          g.data<float>()[0] = step == 7 ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
        }
        const double scale = scaler.current_scale();
        const bool ok = scaler.unscale(params);
        taken.push_back(ok);
        if (ok) {
          const Tensor got = params[0].grad().to_local().to(DType::f64);
          for (int64_t i = 0; i < got.numel(); ++i)
            if (std::abs(got.data<double>()[i] * scale - want.data<double>()[i]) > 1e-5 * scale)
              f.add("step " + std::to_string(step) + ": the weight's gradient is not unscaled");
        } else if (scaler.found() != "bias on rank " + std::to_string(bad_rank)) {
          f.add("step " + std::to_string(step) + ": found " + scaler.found().value_or("nothing"));
        }
        scaler.update();
        for (const nn::Variable& p : params) p.zero_grad();
        f.add_cases(1);
      }
      for (int64_t step = 0; step < 10; ++step)
        if (taken[size_t(step)] == bool(bad_steps.count(step)))
          f.add("step " + std::to_string(step) + (taken[size_t(step)] ? " taken" : " skipped"));
      // 1024 -> 512 (step 2) -> 256 (step 3) -> clean 4, 5, 6: 512 -> 256 (step 7) -> clean 8, 9.
      if (scaler.current_scale() != 256 || scaler.skipped_steps() != 3 || scaler.growth_tracker() != 2)
        f.add("scale " + std::to_string(scaler.current_scale()) + ", skipped " +
              std::to_string(scaler.skipped_steps()) + ", tracker " + std::to_string(scaler.growth_tracker()));
    });
    f.report(10);
  }
}

TEST(LossScaler, DisabledChecksOnlyAndBadOptionsAreRefused) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    auto layer = std::make_shared<nn::Linear>(3, 2, false);
    layer->materialize(mesh, 1);
    LossScaler off(
        {.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 1, .enabled = false});
    EXPECT_EQ(off.current_scale(), 1.0);
    nn::sum((*layer)(nn::Variable(as_replicate(Tensor::ones({1, 3}), mesh)))).backward();
    EXPECT_TRUE(off.unscale(layer->parameters()));
    off.update();
    EXPECT_EQ(off.current_scale(), 1.0);
  });
  EXPECT_THROW(
      LossScaler({.init_scale = 0, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 1, .enabled = true}),
      InvalidArgument);
  EXPECT_THROW(
      LossScaler({.init_scale = 1, .growth_factor = 2, .backoff_factor = 1.5, .growth_interval = 1, .enabled = true}),
      InvalidArgument);
}

}  // namespace
}  // namespace dt::train
