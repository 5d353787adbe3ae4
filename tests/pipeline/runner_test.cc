// PipelineRunner on the thread backend: the GPT trained for 20 steps with GPipe, 1F1B and interleaved 1F1B on 2 and
// 4 pipeline ranks equals one process (losses and final parameters within f32 rounding), including a layer count
// that does not divide by the stages (a stage with the head only) and a microbatch count that does not divide the
// batch (uneven microbatches); the global norm clipped across stages; schedules the runner refuses.
#include "pipeline/runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "collectives/thread/thread_comm.h"
#include "dtensor/comm_counter.h"
#include "fsdp/fully_shard.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "pipeline/gpt_stage.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/validate.h"
#include "tests/nn/grad_test_util.h"
#include "tests/pipeline/random_schedules.h"

namespace dt::pipeline {
namespace {

using nn::Variable;

constexpr int64_t kBatch = 10, kSeq = 8, kSteps = 20;

nn::GptConfig config(int64_t layers) {
  nn::GptConfig c = nn_test::uneven_gpt_config();
  c.layers = layers;
  return c;
}

struct Trained {
  std::vector<double> losses;
  int64_t reduce_scatters = 0;  // issued by rank 0 over the run
  std::map<std::string, Tensor> params;
};

Variable token_loss(const Variable& logits, const DTensor& targets) {
  return nn::div(nn::cross_entropy(logits, targets, -100, LossReduction::kSum), double(kBatch * kSeq));
}

// The recipe of train_gpt: loss = sum of token losses / global tokens, clip the global norm to 1, AdamW.
nn::AdamW make_optimizer(const std::vector<Variable>& params) {
  return nn::AdamW(params, {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
}

const Trained& one_process(int64_t layers) {
  static std::map<int64_t, Trained> cache;
  auto it = cache.find(layers);
  if (it != cache.end()) return it->second;
  Trained out;
  run_threads(1, [&](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {1}, {"tp"});
    const nn::GptConfig cfg = config(layers);
    auto model = std::make_shared<nn::Gpt>(cfg);
    model->materialize(mesh, 5);
    const std::vector<Variable> params = model->parameters();
    nn::AdamW opt = make_optimizer(params);
    for (int64_t step = 0; step < kSteps; ++step) {
      const Tensor tokens = nn_test::step_tokens(kBatch, kSeq, cfg.vocab, step);
      Tensor ids = tokens.narrow(1, 0, kSeq).contiguous(), tgt = tokens.narrow(1, 1, kSeq).contiguous();
      Variable loss =
          token_loss((*model)(Variable(nn_test::replicate_on(ids, mesh))), nn_test::replicate_on(tgt, mesh));
      loss.backward();
      out.losses.push_back(loss.data().full_tensor().to(DType::f64).data<double>()[0]);
      nn::clip_grad_norm_(params, 1.0);
      opt.step();
      opt.zero_grad();
    }
    for (auto& [n, p] : model->named_parameters()) out.params[n] = p.full_tensor();
  });
  return cache[layers] = out;
}

// Inside each stage: dp ranks share every microbatch's rows (FSDP over dp when `fsdp`, reducing once a step, else
// the gradients all-reduced after the step), tp ranks split the blocks (Megatron's plan).
struct Inner {
  int64_t dp = 1, tp = 1;
  bool fsdp = false;
  bool sp = false;  // sequence parallelism: the boundary tensors are Shard(1) on tp
};

Trained pipelined(const Schedule& schedule, int64_t layers, const Inner& in = {}) {
  Trained out;
  std::mutex mu;
  const int64_t pp = schedule.num_ranks;
  run_threads(int(pp * in.dp * in.tp), [&](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {pp, in.dp, in.tp}, {"pp", "dp", "tp"});
    DeviceMesh stage_mesh = mesh["tp"], dp_tp = mesh[{"dp", "tp"}];
    const int me = int(mesh.local_rank("pp")), dp_rank = int(mesh.local_rank("dp"));
    const nn::GptConfig cfg = config(layers);
    auto model = std::make_shared<nn::Gpt>(cfg);  // declared whole; only this rank's stages are materialized
    if (in.tp > 1) nn::parallelize_module(model, stage_mesh, nn::gpt_tp_plan(cfg, in.sp));
    std::vector<StageModule> mine;
    std::vector<Variable> params;
    std::map<int, fsdp::FsdpModule> sharded;
    const fsdp::FsdpOptions fo{.mesh_dims = {"dp"}, .reshard_after_forward = false, .gradient_divide_factor = 1.0};
    for (int s = 0; s < schedule.num_stages; ++s) {
      if (schedule.stage_rank[size_t(s)] != me) continue;
      nn::ModulePtr stage = gpt_stage(model, s, schedule.num_stages);
      stage->materialize(stage_mesh, 5);
      if (in.fsdp) {
        for (auto& [name, child] : stage->named_modules())
          if (name.rfind("layers.", 0) == 0 && name.find('.', 7) == std::string::npos)
            fsdp::fully_shard(child, dp_tp, fo);
        sharded.emplace(s, fsdp::fully_shard(stage, dp_tp, fo));
      }
      for (const Variable& p : stage->parameters()) params.push_back(p);
      mine.push_back({s, stage});
    }
    const int m = schedule.num_microbatches;
    // This dp rank's rows of microbatch mb.
    const auto rows_of = [&](int mb) {
      const IndexRange mrows = balanced_range(kBatch, m, mb), part = chunk_range(mrows.size(), in.dp, dp_rank);
      return IndexRange{mrows.begin + part.begin, mrows.begin + part.end};
    };
    PipelineRunner runner({.schedule = schedule,
                           .pp_rank = me,
                           .pp_comm = mesh.comm("pp"),
                           .stage_mesh = stage_mesh,
                           .stages = mine,
                           .boundary_shape =
                               [&](int, int mb) {
                                 return Shape{rows_of(mb).size(), kSeq, cfg.dim};
                               },
                           .boundary_placements = in.sp ? std::vector<Placement>{Shard{1}} : std::vector<Placement>{},
                           .before_backward =
                               [&](int stage, bool last) {
                                 if (in.fsdp) sharded.at(stage).set_requires_gradient_sync(last);
                               }});
    nn::AdamW opt = make_optimizer(params);
    CommCounter counter;
    for (int64_t step = 0; step < kSteps; ++step) {
      const Tensor tokens = nn_test::step_tokens(kBatch, kSeq, cfg.vocab, step);
      std::vector<DTensor> inputs, targets;
      for (int mb = 0; mb < m; ++mb) {
        const IndexRange rows = rows_of(mb);
        Tensor part = tokens.narrow(0, rows.begin, rows.size());
        inputs.push_back(nn_test::replicate_on(part.narrow(1, 0, kSeq).contiguous(), stage_mesh));
        targets.push_back(nn_test::replicate_on(part.narrow(1, 1, kSeq).contiguous(), stage_mesh));
      }
      Tensor loss = Tensor::from_vector({runner.step(inputs, targets, token_loss)}, {1}, DType::f64);
      if (in.dp > 1) {
        if (!in.fsdp) nn::all_reduce_gradients(params, mesh["dp"], ReduceOp::kSum);
        mesh.comm("dp")->all_reduce(loss, ReduceOp::kSum)->wait();
      }
      clip_grad_norm_(params, 1.0, mesh.comm("pp"));
      opt.step();
      opt.zero_grad();
      std::lock_guard<std::mutex> lock(mu);
      if (world->rank() == 0) out.losses.push_back(loss.data<double>()[0]);
    }
    std::vector<std::pair<std::string, Tensor>> full;
    for (const StageModule& st : mine)
      for (auto& [n, p] : st.module->named_parameters()) full.emplace_back(n, p.full_tensor());
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [n, t] : full) out.params[n] = t;
    if (world->rank() == 0) out.reduce_scatters = counter.count(CollectiveKind::kReduceScatter);
  });
  return out;
}

void expect_matches(const Trained& got, const Trained& want, const std::string& label) {
  constexpr double kRtol = 1e-5;
  ASSERT_EQ(got.losses.size(), want.losses.size()) << label;
  double worst = 0, worst_param = 0;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    const double rel = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kRtol) << label << " step " << i << ": loss " << got.losses[i] << ", one process " << want.losses[i];
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << label << ": every parameter on some stage, once";
  for (const auto& [name, w] : want.params) {
    auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << label << ": " << name << " on no stage";
    ASSERT_EQ(it->second.shape(), w.shape()) << label << " " << name;
    const Tensor d = kernels::sub(it->second.to(DType::f64), w.to(DType::f64));
    const double rel = std::sqrt(kernels::sum(kernels::mul(d, d)).item()) /
                       std::sqrt(kernels::sum(kernels::mul(w.to(DType::f64), w.to(DType::f64))).item());
    worst_param = std::max(worst_param, rel);
    EXPECT_LE(rel, kRtol) << label << " parameter " << name;
  }
  std::printf("  %s: loss %.5f -> %.5f; largest relative difference to one process: losses %.1e, parameters %.1e\n",
              label.c_str(), got.losses.front(), got.losses.back(), worst, worst_param);
}

TEST(PipelineRunner, GpipeOnTwoRanksEqualsOneProcess) {
  expect_matches(pipelined(gpipe(2, 4), 2), one_process(2), "gpipe pp 2, 4 microbatches");
}

TEST(PipelineRunner, OneFOneBWithUnevenMicrobatchesEqualsOneProcess) {
  expect_matches(pipelined(one_f_one_b(2, 3), 2), one_process(2), "1f1b pp 2, 3 microbatches of 10 rows");
}

TEST(PipelineRunner, FourStagesOverThreeBlocksEqualOneProcess) {
  // 3 blocks over 4 stages: stage 3 holds the norm and the output projection only.
  expect_matches(pipelined(one_f_one_b(4, 5), 3), one_process(3), "1f1b pp 4, 3 layers, 5 microbatches");
  expect_matches(pipelined(gpipe(4, 2), 3), one_process(3), "gpipe pp 4, 3 layers, 2 microbatches");
}

TEST(PipelineRunner, InterleavedEqualsOneProcess) {
  // 4 stages on 2 ranks (stage s on rank s % 2): stage 1 -> 2 crosses from rank 1 back to rank 0.
  expect_matches(pipelined(interleaved_one_f_one_b(2, 4, 2), 4), one_process(4), "interleaved pp 2 x v 2");
  expect_matches(pipelined(interleaved_one_f_one_b(2, 2, 2), 3), one_process(3), "interleaved pp 2 x v 2, 3 layers");
}

// TP and data parallelism inside the stages: pp 2 x tp 2, pp 2 x dp 2 (FSDP reducing once a step, and plain
// gradient all-reduce), and pp 2 x dp 2 x tp 2 on 8 ranks.
TEST(PipelineRunner, ComposedWithTensorAndDataParallelismEqualsOneProcess) {
  expect_matches(pipelined(one_f_one_b(2, 3), 3, {.tp = 2}), one_process(3), "1f1b pp 2 x tp 2");
  // Sequence parallelism: the boundary tensors are the blocks' Shard(1) activations, each tp rank sending its block.
  expect_matches(pipelined(one_f_one_b(2, 3), 3, {.tp = 2, .sp = true}), one_process(3), "1f1b pp 2 x tp 2 (sp)");
  const Trained fsdp3 = pipelined(one_f_one_b(2, 3), 3, {.dp = 2, .fsdp = true});
  expect_matches(fsdp3, one_process(3), "1f1b pp 2 x fsdp 2");
  // FSDP reduces once a step, after the stage's last microbatch: as many reduce-scatters as with one microbatch.
  const Trained fsdp1 = pipelined(one_f_one_b(2, 1), 3, {.dp = 2, .fsdp = true});
  EXPECT_GT(fsdp1.reduce_scatters, 0);
  EXPECT_EQ(fsdp3.reduce_scatters, fsdp1.reduce_scatters);
  std::printf("  reduce-scatters of rank 0 over %lld steps: %lld with 3 microbatches, %lld with 1\n", (long long)kSteps,
              (long long)fsdp3.reduce_scatters, (long long)fsdp1.reduce_scatters);
  expect_matches(pipelined(gpipe(2, 2), 3, {.dp = 2}), one_process(3), "gpipe pp 2 x dp 2 (all-reduce)");
  expect_matches(pipelined(interleaved_one_f_one_b(2, 4, 2), 4, {.dp = 2, .tp = 2, .fsdp = true}), one_process(4),
                 "interleaved pp 2 x v 2 x fsdp 2 x tp 2");
}

// ZB-H1: backwards split into I (input gradients) and W (the Linear weights', deferred), on 2 and 4 ranks and with
// TP inside the stages.
TEST(PipelineRunner, ZeroBubbleEqualsOneProcess) {
  expect_matches(pipelined(zero_bubble_h1(2, 4), 2), one_process(2), "zb-h1 pp 2, 4 microbatches");
  expect_matches(pipelined(zero_bubble_h1(4, 5), 3), one_process(3), "zb-h1 pp 4, 3 layers, 5 microbatches");
  expect_matches(pipelined(zero_bubble_h1(2, 3), 3, {.tp = 2}), one_process(3), "zb-h1 pp 2 x tp 2");
}

// A stage that scales its input by its own weight (y = x * w): any placement of stages on ranks, the loss and every
// weight's gradient known in closed form.
class ScaleStage : public nn::Module {
 public:
  ScaleStage() : Module("ScaleStage") { register_parameter("w", {4}, nn::Init::uniform(0.5, 1.5)); }
  std::vector<Variable> forward(const std::vector<Variable>& in) override {
    return {nn::mul(in[0], get_parameter("w"))};
  }
};

// Random valid schedules (tests/pipeline/random_schedules.h: random stage placement, I / W splits, any legal order)
// run on PipelineRunner, one thread per rank: every one runs to the end (a hang would fail the receive's deadline),
// with the loss and every weight's gradient of the sequential computation.
TEST(PipelineRunner, RandomValidSchedulesRunAndEqualTheSequentialModel) {
  Rng rng{77};
  int ran = 0;
  for (int n = 0; n < 300 && ran < 150; ++n) {
    const Schedule s = random_schedule(rng);
    bool fsdp = false;
    for (const auto& list : s.actions)
      for (const Action& a : list) fsdp = fsdp || is_fsdp(a.kind);
    if (fsdp) continue;  // the runner leaves FSDP to its hooks
    ++ran;
    const int S = s.num_stages, M = s.num_microbatches;
    const auto input_of = [](int mb) {
      return Tensor::from_vector({0.1 * (mb + 1), -0.2 * (mb + 1), 0.3, 0.05 * (mb + 2)}, {1, 4}, DType::f32);
    };
    std::vector<std::vector<double>> weights(static_cast<size_t>(S)), grads(static_cast<size_t>(S));
    double loss = 0;
    std::mutex mu;
    run_threads(s.num_ranks, [&](CommunicatorPtr world) {
      set_default_world(world, true);
      DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {s.num_ranks, 1}, {"pp", "stage"});
      const int me = int(mesh.local_rank("pp"));
      std::vector<StageModule> mine;
      for (int st = 0; st < S; ++st)
        if (s.stage_rank[size_t(st)] == me) {
          auto m = std::make_shared<ScaleStage>();
          m->materialize(mesh["stage"], uint64_t(st));
          mine.push_back({st, m});
        }
      PipelineRunner runner({.schedule = s,
                             .pp_rank = me,
                             .pp_comm = mesh.comm("pp"),
                             .stage_mesh = mesh["stage"],
                             .stages = mine,
                             .boundary_shape = [](int, int) {
                               return Shape{1, 4};
                             }});
      std::vector<DTensor> in;
      for (int mb = 0; mb < M; ++mb) in.push_back(nn_test::replicate_on(input_of(mb), mesh["stage"]));
      const double l = runner.step(in, in, [](const Variable& y, const DTensor&) { return nn::sum(y); });
      std::lock_guard<std::mutex> lock(mu);
      if (me == 0) loss = l;
      for (const StageModule& st : mine) {
        const Variable w = st.module->get_parameter("w");
        weights[size_t(st.stage)] = w.full_tensor().to_vector();
        grads[size_t(st.stage)] = w.grad().full_tensor().to_vector();
      }
    });
    // The sequential model: loss = sum over microbatches and entries of x * w_0 * ... * w_{S-1}.
    double want_loss = 0;
    std::vector<std::vector<double>> want_grads(size_t(S), std::vector<double>(4, 0.0));
    for (int mb = 0; mb < M; ++mb) {
      const std::vector<double> x = input_of(mb).to_vector();
      for (size_t j = 0; j < 4; ++j) {
        double all = x[j];
        for (int st = 0; st < S; ++st) all *= weights[size_t(st)][j];
        want_loss += all;
        for (int st = 0; st < S; ++st) want_grads[size_t(st)][j] += all / weights[size_t(st)][j];
      }
    }
    SCOPED_TRACE(format_schedule(s));
    EXPECT_NEAR(loss, want_loss, 1e-5 * (1 + std::abs(want_loss)));
    for (int st = 0; st < S; ++st)
      for (size_t j = 0; j < 4; ++j)
        EXPECT_NEAR(grads[size_t(st)][j], want_grads[size_t(st)][j], 1e-5 * (1 + std::abs(want_grads[size_t(st)][j])))
            << "stage " << st;
  }
  std::printf("  %d random valid schedules ran on the runner\n", ran);
  EXPECT_GE(ran, 100);
}

TEST(PipelineRunner, StageLayersSplitEvenly) {
  EXPECT_EQ(stage_layers(5, 2, 0), (IndexRange{0, 3}));
  EXPECT_EQ(stage_layers(5, 2, 1), (IndexRange{3, 5}));
  EXPECT_EQ(stage_layers(3, 4, 3), (IndexRange{3, 3}));  // no block: the head only
  EXPECT_THROW(stage_layers(3, 4, 4), InvalidArgument);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineRunner, RefusesWhatItCannotRun) {
  run_threads(2, [](CommunicatorPtr world) {
    set_default_world(world, true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 1}, {"pp", "tp"});
    const int me = int(mesh.local_rank("pp"));
    auto model = std::make_shared<nn::Gpt>(config(2));
    nn::ModulePtr stage = gpt_stage(model, me, 2);
    const auto make = [&](Schedule s, std::vector<StageModule> stages) {
      PipelineRunner({.schedule = std::move(s),
                      .pp_rank = me,
                      .pp_comm = mesh.comm("pp"),
                      .stage_mesh = mesh["tp"],
                      .stages = std::move(stages),
                      .boundary_shape = [](int, int) {
                        return Shape{1, kSeq, 32};
                      }});
    };
    EXPECT_NE(error_of([&] {
                make(one_f_one_b(2, 2, {.fsdp = true}), {{me, stage}});
              }).find("FSDP's actions"),
              std::string::npos);
    EXPECT_NE(error_of([&] { make(one_f_one_b(2, 2), {}); }).find("no module was given for it"), std::string::npos);
    EXPECT_NE(error_of([&] {
                make(one_f_one_b(2, 2), {{1 - me, stage}});
              }).find("not on this rank"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                make(one_f_one_b(3, 2), {{me, stage}});
              }).find("3 ranks but the pp communicator has 2"),
              std::string::npos);
  });
  auto tied = config(2);
  tied.tie_embeddings = true;
  EXPECT_NE(error_of([&] { gpt_stage(std::make_shared<nn::Gpt>(tied), 0, 2); }).find("tied embeddings"),
            std::string::npos);
}

// Messages between two ranks pair in posting order, but a schedule may receive them in another (Note [Pipeline
// runner]): the interleaved schedule on 2 ranks with 5 microbatches receives a gradient before an activation posted
// earlier on the same channel, and a GPipe whose last rank receives microbatch 1 before microbatch 0. Both train as
// one process does.
TEST(PipelineRunner, ReceivesInAnotherOrderThanPostedEqualOneProcess) {
  expect_matches(pipelined(interleaved_one_f_one_b(2, 5, 2), 4), one_process(4), "interleaved pp 2 x v 2, m 5");
  Schedule s = gpipe(2, 2);
  std::vector<Action>& rank1 = s.actions[1];
  rank1.erase(std::find(rank1.begin(), rank1.end(), parse_action("1RECV_F1")));
  rank1.insert(std::find(rank1.begin(), rank1.end(), parse_action("1RECV_F0")), parse_action("1RECV_F1"));
  ASSERT_EQ(to_string(rank1[0]), "1RECV_F1");
  validate(s);
  expect_matches(pipelined(s, 2), one_process(2), "gpipe pp 2, microbatch 1 received first");
}

}  // namespace
}  // namespace dt::pipeline
