// Memory accounting of the nn layer (core/memory_stats.h): materializing a module charges its parameters' bytes to
// "parameters", an optimizer's first step its state to "optimizer state". Ranks are threads of this process, so the
// process-wide counters hold every rank's share: the expected figures sum each rank's local shards, computed from
// their shapes (tensor-parallel, with uneven and empty shards).
#include <gtest/gtest.h>

#include <atomic>

#include "core/memory_stats.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

int64_t local_bytes(const Variable& p) { return p.to_local().numel() * int64_t(dtype_size(p.to_local().dtype())); }

TEST(NnMemory, MaterializeChargesParametersAndAdamWItsTwoMoments) {
  nn::GptConfig c;
  c.vocab = 11;  // over 3 ranks: 4, 4, 3 rows
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.hidden = 10;
  const Device cpu = Device::cpu();
  for (int64_t tp : {1, 3}) {
    std::atomic<int64_t> param_bytes{0};
    MemoryUsage fresh, materialized, before_step, stepped;
    op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
      auto sync = [&] { mesh.comm(0)->barrier()->wait(); };
      auto model = std::make_shared<nn::Gpt>(c);
      if (tp > 1) nn::parallelize_module(model, mesh, nn::gpt_tp_plan(c));
      sync();
      if (mesh.global_rank() == 0) fresh = memory_usage(cpu);
      sync();
      model->materialize(mesh, 5);
      std::vector<Variable> params;
      for (auto& [name, p] : model->named_parameters()) {
        params.push_back(p);
        param_bytes += local_bytes(p);
      }
      sync();
      if (mesh.global_rank() == 0) materialized = memory_usage(cpu);
      // Gradients: d/dp sum(p * p) = 2p, so every parameter has one.
      for (const Variable& p : params) nn::sum(nn::mul(p, p)).backward();
      nn::AdamW opt(params);
      sync();
      if (mesh.global_rank() == 0) before_step = memory_usage(cpu);
      sync();
      opt.step();
      sync();
      if (mesh.global_rank() == 0) stepped = memory_usage(cpu);
      sync();
    });
    const auto kp = MemoryKind::kParameters, ko = MemoryKind::kOptimizerState;
    EXPECT_GT(param_bytes.load(), 0);
    EXPECT_EQ(materialized.current_of(kp) - fresh.current_of(kp), param_bytes.load()) << "tp " << tp;
    EXPECT_EQ(materialized.current_of(ko), fresh.current_of(ko)) << "tp " << tp;
    EXPECT_EQ(stepped.current_of(ko) - before_step.current_of(ko), 2 * param_bytes.load()) << "tp " << tp;
    EXPECT_EQ(stepped.current_of(kp), before_step.current_of(kp)) << "tp " << tp;  // updated in place
  }
}

}  // namespace
}  // namespace dt
