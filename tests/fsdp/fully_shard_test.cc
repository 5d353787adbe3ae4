// fully_shard on the thread backend: the GPT trained for 20 steps with FSDP, HSDP and FSDP + TP equals one process
// (losses and final parameters), with parameters whose dim 0 does not divide by the data-parallel size;
// accumulation without sync equals one big batch; mixed precision follows the f32 run; prefetch order and the
// bound on gathered groups; bad input.
#include "fsdp/fully_shard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "collectives/thread/thread_comm.h"
#include "core/splitmix.h"
#include "dtensor/comm_counter.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

struct Config {
  int64_t rep = 1, shard = 1, tp = 1;  // mesh (rep, shard, tp); rep * shard ranks share the batch
  bool fsdp = false;
  fsdp::FsdpOptions options;
  int64_t micro_batches = 1;  // > 1: accumulate without gradient sync, then one reduction
  bool checkpoint = false;    // activation checkpointing of every block
  int64_t world() const { return rep * shard * tp; }
};

struct Trained {
  std::vector<double> losses;
  int64_t reduce_scatters = 0;                         // issued by rank 0 over the run
  std::vector<std::pair<std::string, Tensor>> params;  // full values after training
};

constexpr int64_t kBatch = 12, kSeq = 8;

// train_gpt's recipe: loss = sum of token losses / global tokens, backward (gradients summed over dp), clip the
// global norm to 1, AdamW.
Trained train(const Config& s, int64_t steps, const std::function<void(nn::Module&, int64_t step)>& inspect = {}) {
  Trained out;
  run_threads(int(s.world()), [&](CommunicatorPtr world) {
    set_default_world(world, /*this_thread_only=*/true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {s.rep, s.shard, s.tp}, {"rep", "shard", "tp"});
    DeviceMesh tp = mesh["tp"];
    const nn::GptConfig cfg = nn_test::uneven_gpt_config();
    auto model = std::make_shared<nn::Gpt>(cfg);
    if (s.tp > 1) nn::parallelize_module(model, tp, nn::gpt_tp_plan(cfg, false));
    model->materialize(tp, 5);
    if (s.checkpoint)
      for (auto& block : model->layers) block->set_activation_checkpointing(true);
    std::optional<fsdp::FsdpModule> root;
    if (s.fsdp) {
      fsdp::FsdpOptions o = s.options;
      if (o.mesh_dims.empty())
        o.mesh_dims = s.rep > 1 ? std::vector<std::string>{"rep", "shard"} : std::vector<std::string>{"shard"};
      if (!o.gradient_divide_factor) o.gradient_divide_factor = 1.0;
      for (auto& block : model->layers) fsdp::fully_shard(block, mesh, o);
      root = fsdp::fully_shard(model, mesh, o);
    }
    const std::vector<Variable> params = model->parameters();
    nn::AdamW opt(params, {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    const int64_t dp = s.rep * s.shard;
    CommCounter counter;
    const int64_t dp_rank = mesh.local_rank(0) * s.shard + mesh.local_rank(1);
    for (int64_t step = 0; step < steps; ++step) {
      const Tensor tokens = nn_test::step_tokens(kBatch, kSeq, cfg.vocab, step);
      double loss_sum = 0;
      // Micro-batches: this dp rank's rows of each, split as torch.chunk splits.
      for (int64_t mb = 0; mb < s.micro_batches; ++mb) {
        const IndexRange mrows = chunk_range(kBatch, s.micro_batches, mb);
        const IndexRange rows = chunk_range(mrows.size(), dp, dp_rank);
        Tensor part = tokens.narrow(0, mrows.begin + rows.begin, rows.size());
        Tensor ids = part.narrow(1, 0, kSeq).contiguous(), tgt = part.narrow(1, 1, kSeq).contiguous();
        if (root) root->set_requires_gradient_sync(mb == s.micro_batches - 1);
        Variable logits = (*model)(Variable(nn_test::replicate_on(ids, tp)));
        Variable loss = nn::div(nn::cross_entropy(logits, nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum),
                                double(kBatch * kSeq));
        loss.backward();
        loss_sum += loss.full_tensor().to(DType::f64).data<double>()[0];
      }
      if (inspect) inspect(*model, step);
      nn::clip_grad_norm_(params, 1.0);
      opt.step();
      opt.zero_grad();
      Tensor l = Tensor::from_vector({loss_sum}, {1}, DType::f64);
      if (dp > 1) mesh.flatten({"rep", "shard"}).comm(0)->all_reduce(l, ReduceOp::kSum)->wait();
      if (world->rank() == 0) out.losses.push_back(l.data<double>()[0]);
    }
    if (world->rank() == 0) out.reduce_scatters = counter.count(CollectiveKind::kReduceScatter);
    for (auto& [n, p] : model->named_parameters()) {
      Tensor full = p.full_tensor();
      if (world->rank() == 0) out.params.emplace_back(n, full);
    }
  });
  return out;
}

void expect_matches(const Trained& got, const Trained& want, const std::string& label, double rtol) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << label;
  double worst = 0;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    const double rel = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, rtol) << label << " step " << i << ": loss " << got.losses[i] << ", one process " << want.losses[i];
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << label;
  double worst_param = 0, worst_entry = 0;
  for (size_t i = 0; i < want.params.size(); ++i) {
    EXPECT_EQ(got.params[i].first, want.params[i].first);
    const Tensor& g = got.params[i].second;
    const Tensor& w = want.params[i].second;
    ASSERT_EQ(g.shape(), w.shape()) << label << " " << want.params[i].first;
    // Norm-wise relative difference (||got - want|| / ||want||): Adam moves an entry whose gradient is near zero
    // by up to lr per step on either side of the tie, so single entries amplify the f32 summation order.
    const Tensor d = kernels::sub(g.to(DType::f64), w.to(DType::f64));
    const double rel = std::sqrt(kernels::sum(kernels::mul(d, d)).item()) /
                       std::sqrt(kernels::sum(kernels::mul(w.to(DType::f64), w.to(DType::f64))).item());
    worst_param = std::max(worst_param, rel);
    EXPECT_LE(rel, rtol) << label << " parameter " << want.params[i].first;
    worst_entry = std::max(worst_entry, max_abs_diff(g, w));
  }
  std::printf(
      "  %s: loss %.5f -> %.5f; largest relative difference to one process: losses %.1e, parameters %.1e "
      "(largest entry difference %.1e)\n",
      label.c_str(), got.losses.front(), got.losses.back(), worst, worst_param, worst_entry);
}

const Trained& reference() {
  static const Trained r = train(Config{}, 20);
  return r;
}

TEST(FullyShard, FsdpTrainingEqualsOneProcess) {
  const Trained& want = reference();
  EXPECT_LT(want.losses.back(), 0.9 * want.losses.front()) << "the recipe trains";
  Config s;
  s.shard = 3;
  s.fsdp = true;
  expect_matches(train(s, 20), want, "fsdp 3", 1e-5);
}

TEST(FullyShard, HsdpTrainingEqualsOneProcess) {
  Config s;
  s.rep = 2;
  s.shard = 2;
  s.fsdp = true;
  expect_matches(train(s, 20), reference(), "hsdp 2 x 2", 1e-5);
}

TEST(FullyShard, FsdpWithTensorParallelEqualsOneProcess) {
  Config s;
  s.shard = 2;
  s.tp = 2;
  s.fsdp = true;
  expect_matches(train(s, 20), reference(), "fsdp 2 x tp 2", 1e-5);
}

TEST(FullyShard, ParametersAndGradientsAreShardsBetweenSteps) {
  Config s;
  s.shard = 3;
  s.fsdp = true;
  train(s, 2, [](nn::Module& model, int64_t) {
    for (auto& [n, p] : model.named_parameters()) {
      EXPECT_EQ(p.placements(), (std::vector<Placement>{Replicate{}, Shard{0}, Replicate{}})) << n;
      ASSERT_TRUE(p.grad().defined()) << n;
      EXPECT_TRUE(p.grad().spec() == p.spec()) << n << ": gradient " << p.grad().spec().to_string();
      EXPECT_EQ(p.grad().to_local().shape(), p.to_local().shape()) << n;
      const IndexRange rows = chunk_range(p.shape()[0], 3, p.mesh().local_rank(1));
      EXPECT_EQ(p.to_local().size(0), rows.size()) << n << ": torch.chunk's rows, no padding";
    }
  });
}

// Under TP, FSDP shards what TP left on each rank: a column-parallel weight (TP already splits dim 0) gets the nested
// order, tp first, then dp; a row-parallel one (TP splits dim 1) the default; full_tensor() is exact either way.
TEST(FullyShard, NestedShardOrderUnderTensorParallel) {
  Config s;
  s.shard = 2;
  s.tp = 2;
  s.fsdp = true;
  train(s, 1, [](nn::Module& model, int64_t) {
    const Variable wq = model.get_parameter("layers.0.attention.wq.weight");
    EXPECT_EQ(wq.spec().to_string(), "R,S(0)[1],S(0)[0]");
    const Variable wo = model.get_parameter("layers.0.attention.wo.weight");
    EXPECT_EQ(wo.spec().to_string(), "R,S(0),S(1)");
    // The local block is dp's torch.chunk rows of tp's torch.chunk rows.
    const IndexRange tp_rows = chunk_range(wq.shape()[0], 2, wq.mesh().local_rank(2));
    const IndexRange rows = chunk_range(tp_rows.size(), 2, wq.mesh().local_rank(1));
    EXPECT_EQ(wq.to_local().size(0), rows.size());
  });
}

TEST(FullyShard, AccumulationWithoutSyncEqualsOneBigBatch) {
  Config s;
  s.shard = 3;
  s.fsdp = true;
  s.micro_batches = 3;
  const Trained got = train(s, 20);
  expect_matches(got, reference(), "fsdp 3, 3 micro-batches", 1e-5);
  // 3 groups (2 blocks, the root), one reduce-scatter each per step: none in the micro-batches without sync.
  EXPECT_EQ(got.reduce_scatters, 20 * 3);
}

TEST(FullyShard, ActivationCheckpointingTrainsTheSame) {
  Config s;
  s.shard = 2;
  s.tp = 2;
  s.fsdp = true;
  s.checkpoint = true;
  expect_matches(train(s, 20), reference(), "fsdp 2 x tp 2, checkpointed blocks", 1e-5);
}

TEST(FullyShard, ReshardAfterForwardVariantsTrainTheSame) {
  Config keep;
  keep.shard = 4;
  keep.fsdp = true;
  keep.options.reshard_after_forward = false;
  expect_matches(train(keep, 20), reference(), "fsdp 4, reshard_after_forward false", 1e-5);
  Config share = keep;
  share.options.reshard_after_forward = int64_t(2);
  expect_matches(train(share, 20), reference(), "fsdp 4, reshard_after_forward 2", 1e-5);
}

TEST(FullyShard, MixedPrecisionFollowsTheF32Run) {
  Config s;
  s.shard = 2;
  s.fsdp = true;
  s.options.mp_policy.param_dtype = DType::bf16;
  s.options.mp_policy.reduce_dtype = DType::f32;
  const Trained got = train(s, 20);
  const Trained& want = reference();
  double worst = 0;
  for (size_t i = 0; i < want.losses.size(); ++i)
    worst = std::max(worst, std::abs(got.losses[i] - want.losses[i]) / want.losses[i]);
  // bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3 per value): the losses stay within a few of those
  // and differ from the f32 run (the compute did run in bf16).
  EXPECT_LE(worst, 2e-2);
  EXPECT_GT(worst, 1e-5);
  std::printf("  bf16 parameters, f32 reduction: loss %.5f -> %.5f, largest relative difference to f32 %.1e\n",
              got.losses.front(), got.losses.back(), worst);
}

// The GPT with 3 blocks, each block and then the root fully_shard over mesh["dp"] (the prefetch tests' model).
std::pair<std::shared_ptr<nn::Gpt>, std::vector<fsdp::FsdpModule>> three_sharded_blocks(const DeviceMesh& mesh) {
  nn::GptConfig cfg = nn_test::uneven_gpt_config();
  cfg.layers = 3;
  auto model = std::make_shared<nn::Gpt>(cfg);
  model->materialize(mesh["tp"], 5);
  std::vector<fsdp::FsdpModule> blocks;
  for (auto& b : model->layers) blocks.push_back(fsdp::fully_shard(b, mesh["dp"]));
  fsdp::fully_shard(model, mesh["dp"]);
  return {model, std::move(blocks)};
}

// At every block's forward, at most two blocks' groups are gathered (or gathering): its own and the next one,
// prefetched; from the second step on the next one is always prefetched. Backward prefetches the block before.
TEST(FullyShard, PrefetchesTheNextGroupAndBoundsGatheredGroups) {
  run_threads(2, [](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 1}, {"dp", "tp"});
    auto [model, blocks] = three_sharded_blocks(mesh);
    const nn::GptConfig& cfg = model->config;
    auto gathered = [&] {
      std::vector<int> g;
      for (auto& b : blocks) g.push_back(b.param_group().state() == fsdp::ParamGroup::State::kSharded ? 0 : 1);
      return g;
    };
    std::vector<std::vector<int>> at_forward, at_backward;
    for (size_t i = 0; i < model->layers.size(); ++i) {
      model->layers[i]->register_forward_pre_hook([&](nn::Module&, const std::vector<Variable>&) {
        at_forward.push_back(gathered());
        return std::nullopt;
      });
      model->layers[i]->register_backward_pre_hook([&](nn::Module&) { at_backward.push_back(gathered()); });
    }
    for (int step = 0; step < 2; ++step) {
      at_forward.clear();
      at_backward.clear();
      const Tensor tokens = nn_test::step_tokens(2, kSeq, cfg.vocab, step);
      Variable logits = (*model)(Variable(nn_test::replicate_on(tokens.narrow(1, 0, kSeq).contiguous(), mesh["tp"])));
      nn::sum(logits).backward();
      for (size_t i = 0; i < at_forward.size(); ++i) {
        int n = 0;
        for (int x : at_forward[i]) n += x;
        EXPECT_LE(n, 2) << "step " << step << " block " << i;
        EXPECT_EQ(at_forward[i][i], 1) << "block " << i << " is gathered at its forward";
        if (step == 1 && i + 1 < at_forward.size()) {
          EXPECT_EQ(at_forward[i][i + 1], 1) << "block " << i + 1 << " prefetched";
        }
      }
      ASSERT_EQ(at_backward.size(), model->layers.size());
      for (size_t k = 0; k < at_backward.size(); ++k) {
        const size_t i = at_backward.size() - 1 - k;  // backward runs the blocks in reverse
        EXPECT_EQ(at_backward[k][i], 1) << "block " << i << " is gathered at its backward";
        if (i > 0) {
          EXPECT_EQ(at_backward[k][i - 1], 1) << "block " << i - 1 << " prefetched in backward";
        }
      }
    }
  });
}

// Explicit prefetch replaces the implicit schedule: block 0's forward starts block 2's gather, not block 1's.
TEST(FullyShard, ExplicitPrefetchListsReplaceTheImplicitOnes) {
  run_threads(2, [](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 1}, {"dp", "tp"});
    auto [model, blocks] = three_sharded_blocks(mesh);
    const nn::GptConfig& cfg = model->config;
    blocks[0].set_modules_to_forward_prefetch({model->layers[2]});
    blocks[2].set_modules_to_backward_prefetch({model->layers[0]});
    std::vector<fsdp::ParamGroup::State> at_block0, at_block2_backward;
    model->layers[0]->register_forward_pre_hook([&](nn::Module&, const std::vector<Variable>&) {
      for (auto& b : blocks) at_block0.push_back(b.param_group().state());
      return std::nullopt;
    });
    model->layers[2]->register_backward_pre_hook([&](nn::Module&) {
      for (auto& b : blocks) at_block2_backward.push_back(b.param_group().state());
    });
    const Tensor tokens = nn_test::step_tokens(2, kSeq, cfg.vocab, 0);
    nn::sum((*model)(Variable(nn_test::replicate_on(tokens.narrow(1, 0, kSeq).contiguous(), mesh["tp"])))).backward();
    using S = fsdp::ParamGroup::State;
    ASSERT_EQ(at_block0.size(), 3u);
    EXPECT_EQ(at_block0[1], S::kSharded) << "block 1 is not prefetched";
    EXPECT_NE(at_block0[2], S::kSharded) << "block 2 is prefetched";
    ASSERT_EQ(at_block2_backward.size(), 3u);
    EXPECT_NE(at_block2_backward[0], S::kSharded) << "block 0 is prefetched in backward";
    EXPECT_EQ(at_block2_backward[1], S::kSharded) << "block 1 is not";
    for (auto& b : blocks) EXPECT_EQ(b.param_group().state(), S::kSharded) << "all resharded after backward";
  });
}

TEST(FullyShard, RejectsBadInput) {
  run_threads(2, [](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 1}, {"dp", "tp"});
    auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
      try {
        f();
        ADD_FAILURE() << "expected an error containing '" << needle << "'";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    auto model = std::make_shared<nn::Gpt>(nn_test::uneven_gpt_config());
    model->materialize(mesh["tp"], 5);
    expect_error([&] { fsdp::fully_shard(model, mesh, {.mesh_dims = {"data"}}); }, "has no dim named 'data'");
    fsdp::fully_shard(model->layers[0], mesh, {.mesh_dims = {"dp"}});
    expect_error([&] { fsdp::fully_shard(model->layers[0], mesh["dp"]); }, "already sharded");
    // The optimizer made its state for replicated parameters; sharding them afterwards is refused at its next step.
    auto other = std::make_shared<nn::Gpt>(nn_test::uneven_gpt_config());
    other->materialize(mesh["tp"], 5);
    nn::SGD opt(other->parameters(), {.lr = 0.1, .momentum = 0.9});
    const Tensor tokens = nn_test::step_tokens(2, kSeq, 37, 0);
    auto step = [&] {
      Variable logits = (*other)(Variable(nn_test::replicate_on(tokens.narrow(1, 0, kSeq).contiguous(), mesh["tp"])));
      nn::sum(logits).backward();
      opt.step();
      opt.zero_grad();
    };
    step();
    fsdp::fully_shard(other, mesh["dp"]);
    expect_error(step, "when its state was made");
  });
}

}  // namespace
}  // namespace dt
