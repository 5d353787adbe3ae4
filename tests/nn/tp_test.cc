// Tensor parallelism against the single-process model: the GPT under the Megatron plan (with and without sequence
// parallelism, uneven head counts and sizes) on 1-d meshes, the (dp, tp) mesh with data parallelism, 20 training
// steps (AdamW, clipping) on tp 2 and tp 4 against one rank, and the communication a block costs, counted.
#include <gtest/gtest.h>

#include "core/splitmix.h"
#include "dtensor/comm_counter.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

struct Result {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;
};

Tensor token_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  return Tensor::rand({batch, seq + 1}, seed, DType::i64, 0, double(vocab));
}

// One forward/backward of the GPT on `tp` (1-d) with `rows` of the batch; loss = sum of token losses / total tokens.
// defer: the backward in a DeferWeightGrads scope (Note [Deferred weight gradients]), the queued weight gradients run
// after it; the Linear weights must have none before.
Result run(const nn::GptConfig& cfg, const DeviceMesh& tp, bool parallel, bool sp, const Tensor& tokens, int64_t row0,
           int64_t rows, int64_t total_tokens, bool defer = false) {
  auto m = std::make_shared<nn::Gpt>(cfg);
  if (parallel) nn::parallelize_module(m, tp, nn::gpt_tp_plan(cfg, sp));
  m->materialize(tp, 5);
  const int64_t seq = tokens.size(1) - 1;
  Tensor ids = tokens.narrow(0, row0, rows).narrow(1, 0, seq).contiguous();
  Tensor tgt = tokens.narrow(0, row0, rows).narrow(1, 1, seq).contiguous();
  Variable logits = (*m)(Variable(nn_test::replicate_on(ids, tp)));
  Variable loss = nn::div(nn::cross_entropy(logits, nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum),
                          double(total_tokens));
  if (!defer) {
    loss.backward();
  } else {
    nn::WeightGradQueue queue;
    {
      nn::DeferWeightGrads scope(queue);
      loss.backward();
    }
    int64_t linear = 0;
    for (auto& [n, p] : m->named_parameters()) {
      const bool is_linear = n.find("attention.w") != std::string::npos ||
                             n.find("feed_forward.w") != std::string::npos || (n == "output.weight");
      if (!is_linear || n.find("bias") != std::string::npos) continue;
      ++linear;
      EXPECT_FALSE(p.grad().defined()) << n << ": a Linear weight's gradient before the queue ran";
    }
    EXPECT_EQ(int64_t(queue.size()), linear) << "one queued weight gradient per Linear";
    queue.run();
    EXPECT_EQ(queue.size(), 0u);
  }
  Result r;
  r.loss = loss.full_tensor().to(DType::f64).data<double>()[0];
  for (auto& [n, p] : m->named_parameters()) {
    EXPECT_TRUE(p.grad().spec() == p.spec())
        << n << ": gradient " << p.grad().spec().to_string() << ", parameter " << p.spec().to_string();
    r.grads.emplace_back(n, p.grad().full_tensor());
  }
  return r;
}

void expect_same(const Result& got, const Result& want, const std::string& label, op_test::Failures& f) {
  if (std::abs(got.loss - want.loss) > 1e-5 * std::abs(want.loss))
    f.add(label + ": loss " + std::to_string(got.loss) + ", one process " + std::to_string(want.loss));
  if (got.grads.size() != want.grads.size()) {
    f.add(label + ": different parameter lists");
    return;
  }
  for (size_t i = 0; i < got.grads.size(); ++i) {
    std::string why;
    // f32 sums in another order: relative 1e-4 of the largest gradient entry.
    if (!op_test::compare(got.grads[i].second, want.grads[i].second, false, &why, 10.0))
      f.add(label + ": gradient of " + got.grads[i].first + ": " + why);
    f.add_cases(1);
  }
}

Result single(const nn::GptConfig& cfg, const Tensor& tokens) {
  Result r;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    r = run(cfg, mesh, false, false, tokens, 0, tokens.size(0), tokens.size(0) * (tokens.size(1) - 1));
  });
  return r;
}

nn::GptConfig config(int64_t dim, int64_t heads, int64_t hidden, int64_t vocab, bool tied = false,
                     nn::NormKind norm = nn::NormKind::kRMSNorm, nn::MlpKind mlp = nn::MlpKind::kSwiGlu) {
  nn::GptConfig c;
  c.vocab = vocab;
  c.dim = dim;
  c.layers = 2;
  c.heads = heads;
  c.hidden = hidden;
  c.tie_embeddings = tied;
  c.norm = norm;
  c.mlp = mlp;
  return c;
}

TEST(NnTensorParallel, GptMatchesOneProcess) {
  op_test::Failures f;
  struct Case {
    const char* name;
    nn::GptConfig cfg;
  };
  const std::vector<Case> cases{
      {"even", config(16, 4, 32, 24)},
      {"uneven heads, hidden and vocab", config(12, 3, 20, 13)},
      {"tied head, layer norm, gelu", config(16, 2, 24, 17, true, nn::NormKind::kLayerNorm, nn::MlpKind::kGelu)},
  };
  const Tensor tokens = token_ids(3, 6, 13, 11);  // ids < 13 <= every vocab
  for (const Case& c : cases) {
    const Result want = single(c.cfg, tokens);
    for (int64_t tp : {2, 3}) {
      for (bool sp : {false, true}) {
        op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
          Result got = run(c.cfg, mesh, true, sp, tokens, 0, 3, 18);
          expect_same(got, want, std::string(c.name) + " tp " + std::to_string(tp) + (sp ? " sp" : ""), f);
        });
      }
    }
  }
  f.report(10);
}

// Backward split into input and weight gradients (zero-bubble pipelines): the Linear weights' gradients computed
// later through linear_backward_input / _weight, under the Megatron plan's column- and row-parallel layouts, with
// and without sequence parallelism, equal one process's single backward.
TEST(NnTensorParallel, DeferredWeightGradientsMatchOneBackward) {
  op_test::Failures f;
  const nn::GptConfig cfg = config(12, 3, 20, 13);
  const Tensor tokens = token_ids(3, 6, 13, 12);
  const Result want = single(cfg, tokens);
  for (int64_t tp : {1, 2, 3}) {
    for (bool sp : {false, true}) {
      if (tp == 1 && sp) continue;
      op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
        Result got = run(cfg, mesh, tp > 1, sp, tokens, 0, 3, 18, /*defer=*/true);
        expect_same(got, want, "deferred tp " + std::to_string(tp) + (sp ? " sp" : ""), f);
      });
    }
  }
  f.report(10);
}

TEST(NnTensorParallel, DataTimesTensorParallelMatchesOneProcess) {
  // A 2x2 (dp, tp) mesh: each dp rank takes its rows of the batch (3 rows: uneven), gradients summed over dp.
  op_test::Failures f;
  const nn::GptConfig cfg = config(16, 4, 32, 24);
  const Tensor tokens = token_ids(3, 6, 24, 12);
  const Result want = single(cfg, tokens);
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& unnamed) {
    DeviceMesh mesh = DeviceMesh::create(unnamed.world(), Device::cpu(), {2, 2}, {"dp", "tp"});
    DeviceMesh tp = mesh["tp"], dp = mesh["dp"];
    const int64_t r = dp.local_rank(0);
    const int64_t row0 = r == 0 ? 0 : 2, rows = r == 0 ? 2 : 1;
    auto m = std::make_shared<nn::Gpt>(cfg);
    nn::parallelize_module(m, tp, nn::gpt_tp_plan(cfg));
    m->materialize(tp, 5);
    Tensor ids = tokens.narrow(0, row0, rows).narrow(1, 0, 6).contiguous();
    Tensor tgt = tokens.narrow(0, row0, rows).narrow(1, 1, 6).contiguous();
    Variable loss = nn::div(nn::cross_entropy((*m)(Variable(nn_test::replicate_on(ids, tp))),
                                              nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum),
                            18.0);
    loss.backward();
    nn::all_reduce_gradients(m->parameters(), dp, ReduceOp::kSum);
    Result got;
    Tensor l = loss.full_tensor().to(DType::f64);
    dp.comm(0)->all_reduce(l, ReduceOp::kSum)->wait();
    got.loss = l.data<double>()[0];
    for (auto& [n, p] : m->named_parameters()) got.grads.emplace_back(n, p.grad().full_tensor());
    expect_same(got, want, "dp 2 x tp 2", f);
  });
  f.report(1);
}

// train_gpt's recipe: loss = sum of token losses / tokens, backward, clip the global norm to 1, AdamW step.
std::vector<double> train(const nn::GptConfig& cfg, const DeviceMesh& tp, bool parallel, int64_t steps) {
  auto m = std::make_shared<nn::Gpt>(cfg);
  if (parallel) nn::parallelize_module(m, tp, nn::gpt_tp_plan(cfg));
  m->materialize(tp, 5);
  const std::vector<Variable> params = m->parameters();
  nn::AdamW opt(params, {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  const int64_t batch = 4, seq = 8;
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor tokens = nn_test::step_tokens(batch, seq, cfg.vocab, step);
    Tensor ids = tokens.narrow(1, 0, seq).contiguous(), tgt = tokens.narrow(1, 1, seq).contiguous();
    Variable logits = (*m)(Variable(nn_test::replicate_on(ids, tp)));
    Variable loss = nn::div(nn::cross_entropy(logits, nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum),
                            double(batch * seq));
    loss.backward();
    nn::clip_grad_norm_(params, 1.0);
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.full_tensor().to(DType::f64).data<double>()[0]);
  }
  return losses;
}

TEST(NnTensorParallel, TrainingLossesMatchOneRank) {
  const nn::GptConfig cfg = config(32, 4, 48, 40);
  const int64_t steps = 20;
  std::vector<double> want;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) { want = train(cfg, mesh, false, steps); });
  ASSERT_EQ(int64_t(want.size()), steps);
  // The recipe trains: otherwise agreeing losses would prove little.
  EXPECT_LT(want.back(), 0.9 * want.front()) << "one rank: loss " << want.front() << " -> " << want.back();
  for (int64_t tp : {2, 4}) {
    op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
      const std::vector<double> got = train(cfg, mesh, true, steps);
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (int64_t i = 0; i < steps; ++i) {
        const double rel = std::abs(got[size_t(i)] - want[size_t(i)]) / std::abs(want[size_t(i)]);
        worst = std::max(worst, rel);
        EXPECT_LE(rel, 1e-4) << "tp " << tp << " step " << i << ": loss " << got[size_t(i)] << ", one rank "
                             << want[size_t(i)];
      }
      if (mesh.global_rank() == 0)
        std::printf("  tp %lld: loss %.5f -> %.5f over %lld steps, largest relative difference to one rank %.1e\n",
                    (long long)tp, got.front(), got.back(), (long long)steps, worst);
    });
  }
}

// Collectives of one TransformerBlock's forward and backward under the plan, counted.
struct BlockCounts {
  int64_t fwd_all_reduce = 0, fwd_all_gather = 0, fwd_reduce_scatter = 0, fwd_total = 0;
  int64_t bwd_all_reduce = 0, bwd_all_gather = 0, bwd_reduce_scatter = 0, bwd_total = 0, bwd_all_reduce_bytes = 0;
};

BlockCounts count_block(const DeviceMesh& tp, bool sp) {
  nn::GptConfig cfg = config(16, 4, 32, 24);
  auto block = std::make_shared<nn::TransformerBlock>(16, 4, 32);
  auto holder = std::make_shared<nn::ModuleList>();
  holder->append(block);
  nn::ParallelPlan plan;
  for (auto& [pattern, style] : nn::gpt_tp_plan(cfg, sp))
    if (pattern.rfind("layers.*.", 0) == 0) plan.emplace_back("0." + pattern.substr(9), style);
  nn::parallelize_module(holder, tp, plan);
  holder->materialize(tp, 1);
  DTensor x = nn_test::replicate_on(Tensor::randn({2, 6, 16}, 4), tp);
  if (sp) x = x.redistribute({Shard{1}});
  Variable in(x, true);
  BlockCounts c;
  Variable out;
  {
    CommCounter fwd(tp);
    out = (*block)(in);
    c.fwd_all_reduce = fwd.count(CollectiveKind::kAllReduce);
    c.fwd_all_gather = fwd.count(CollectiveKind::kAllGather);
    c.fwd_reduce_scatter = fwd.count(CollectiveKind::kReduceScatter);
    c.fwd_total = fwd.total();
  }
  // The gradient arrives laid out like the output (as from the next block), so only the block's own backward counts.
  DTensor g = nn::ones_like(out.data());
  CommCounter bwd(tp);
  nn::backward({out}, {g});
  c.bwd_all_reduce = bwd.count(CollectiveKind::kAllReduce);
  c.bwd_all_reduce_bytes = bwd.bytes(CollectiveKind::kAllReduce);
  c.bwd_all_gather = bwd.count(CollectiveKind::kAllGather);
  c.bwd_reduce_scatter = bwd.count(CollectiveKind::kReduceScatter);
  c.bwd_total = bwd.total();
  return c;
}

TEST(NnTensorParallel, CommunicationPerBlock) {
  op_test::on_mesh({2}, [&](const DeviceMesh& tp) {
    BlockCounts c = count_block(tp, false);
    EXPECT_EQ(c.fwd_all_reduce, 2);
    EXPECT_EQ(c.fwd_total, 2);
    EXPECT_EQ(c.bwd_all_reduce, 2);
    EXPECT_EQ(c.bwd_total, 2);
    BlockCounts s = count_block(tp, true);
    EXPECT_EQ(s.fwd_all_gather, 2);
    EXPECT_EQ(s.fwd_reduce_scatter, 2);
    EXPECT_EQ(s.fwd_total, 4);
    EXPECT_EQ(s.bwd_all_gather, 2);
    EXPECT_EQ(s.bwd_reduce_scatter, 2);
    // Sequence parallelism adds what Megatron's adds: the norms' weight gradients are partial sums over the sequence
    // shards, reduced once each (2 all-reduces of dim floats), nothing of activation size.
    EXPECT_EQ(s.bwd_all_reduce, 2);
    EXPECT_EQ(s.bwd_all_reduce_bytes, 2 * 16 * 4);
    EXPECT_EQ(s.bwd_total, 6);
  });
}

}  // namespace
}  // namespace dt
