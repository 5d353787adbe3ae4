// Module-level gradient checks: every parameter gradient of the nn layers (Linear, Embedding, the norms, the MLPs,
// Attention, TransformerBlock, a one-layer Gpt tied and untied)
//   1. in f64 on one rank against central finite differences of loss = sum(module(x) * w) (w fixed, random), on all
//      elements of small parameters and a seeded sample of the others (the parameter's local data perturbed in place);
//   2. under tensor parallelism (the modules' styles from nn/parallel.h, on [2] and [3]) against one rank, the
//      gradients compared as full tensors, and each gradient's placements against its parameter's.
// Also the Dropout module: its per-call seeds, eval mode, and activation checkpointing's recompute of its mask.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "core/splitmix.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;
using op_test::Failures;

using Parallelize = std::function<void(const nn::ModulePtr&, const DeviceMesh&)>;

struct Case {
  std::string name;
  std::function<nn::ModulePtr()> make;
  Shape input;
  int64_t vocab = 0;                                       // > 0: the input is integer ids in [0, vocab)
  std::vector<std::pair<std::string, Parallelize>> plans;  // tensor-parallel variants
};

Tensor input_of(const Case& c) {
  return c.vocab > 0 ? Tensor::rand(c.input, 7, DType::i64, 0, double(c.vocab))
                     : Tensor::rand(c.input, 7, DType::f64, -1.5, 1.5);
}

// loss = sum(out * w), w random of out's shape; out is made Replicate first (a sharded or Partial output included).
Variable weighted_sum(const Variable& out) {
  Tensor w = Tensor::rand(out.shape(), 4242, DType::f64, -1, 1);
  const std::vector<Placement> r(size_t(out.mesh().ndim()), Replicate{});
  Variable o = out.placements() == r ? out : nn::redistribute(out, r);
  return nn::sum(nn::mul(nn::to(o, DType::f64), Variable(nn_test::replicate_on(w, out.mesh()))));
}

double value(const Variable& loss) { return loss.full_tensor().to(DType::f64).data<double>()[0]; }

Variable forward_loss(nn::Module& m, const Tensor& x, const DeviceMesh& mesh) {
  return weighted_sum(m(Variable(nn_test::replicate_on(x, mesh))));
}

// The elements of a parameter to perturb: all of a small one, a seeded sample of a large one.
std::vector<int64_t> sample(int64_t numel, uint64_t seed) {
  constexpr int64_t kAll = 128, kSample = 48;
  std::vector<int64_t> idx;
  if (numel <= kAll) {
    for (int64_t i = 0; i < numel; ++i) idx.push_back(i);
    return idx;
  }
  for (int64_t i = 0; i < kSample; ++i) idx.push_back(int64_t(splitmix64(seed + uint64_t(i)) % uint64_t(numel)));
  return idx;
}

void check_finite_differences(const Case& c, Failures& f) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    nn::ModulePtr m = c.make();
    m->materialize(mesh, 3, DType::f64);
    const Tensor x = input_of(c);
    forward_loss(*m, x, mesh).backward();
    int64_t k = 0;
    for (auto& [name, p] : m->named_parameters()) {
      const std::string label = c.name + ": " + name;
      if (p.dtype() != DType::f64) f.add(label + ": materialized as " + std::string(dtype_name(p.dtype())));
      if (!p.grad().defined()) {
        f.add(label + ": no gradient");
        continue;
      }
      Tensor analytic = p.grad().full_tensor().to(DType::f64).contiguous();
      double* data = p.to_local().data<double>();  // one rank: the whole parameter, contiguous
      const double h = 1e-6;
      for (int64_t j : sample(p.numel(), 1000 * uint64_t(++k))) {
        const double x0 = data[j];
        data[j] = x0 + h;
        const double up = value(forward_loss(*m, x, mesh));
        data[j] = x0 - h;
        const double down = value(forward_loss(*m, x, mesh));
        data[j] = x0;
        const double numeric = (up - down) / (2 * h);
        const double a = analytic.data<double>()[j];
        if (!(std::abs(a - numeric) <= 1e-6 + 1e-5 * std::abs(numeric))) {
          std::ostringstream os;
          os << label << " element " << j << ": autograd " << a << ", finite differences " << numeric;
          f.add(os.str());
        }
        f.add_cases(1);
      }
    }
  });
}

std::vector<std::pair<std::string, Tensor>> gradients(nn::Module& m, Failures& f, const std::string& label) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : m.named_parameters()) {
    if (!p.grad().defined()) {
      f.add(label + ": " + name + " got no gradient");
      out.emplace_back(name, Tensor());
      continue;
    }
    if (!(p.grad().spec() == p.spec()))
      f.add(label + ": gradient of " + name + " is " + p.grad().spec().to_string() + ", the parameter is " +
            p.spec().to_string());
    out.emplace_back(name, p.grad().full_tensor());
  }
  return out;
}

void check_tensor_parallel(const Case& c, Failures& f) {
  const Tensor x = input_of(c);
  std::vector<std::pair<std::string, Tensor>> want;
  double want_loss = 0;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    nn::ModulePtr m = c.make();
    m->materialize(mesh, 3, DType::f64);
    Variable loss = forward_loss(*m, x, mesh);
    loss.backward();
    want_loss = value(loss);
    want = gradients(*m, f, c.name + " one rank");
  });
  for (const auto& [plan_name, parallelize] : c.plans) {
    for (int64_t tp : {2, 3}) {
      const std::string label = c.name + " " + plan_name + " tp " + std::to_string(tp);
      op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
        try {
          nn::ModulePtr m = c.make();
          parallelize(m, mesh);
          m->materialize(mesh, 3, DType::f64);
          Variable loss = forward_loss(*m, x, mesh);
          loss.backward();
          const double got = value(loss);
          if (!(std::abs(got - want_loss) <= 1e-10 + 1e-10 * std::abs(want_loss)))
            f.add(label + ": loss " + std::to_string(got) + ", one rank " + std::to_string(want_loss));
          auto grads = gradients(*m, f, label);
          if (grads.size() != want.size()) {
            f.add(label + ": another parameter list than one rank's");
            return;
          }
          for (size_t i = 0; i < grads.size(); ++i) {
            std::string why;
            if (grads[i].second.defined() && want[i].second.defined() &&
                !op_test::compare(grads[i].second, want[i].second, false, &why))
              f.add(label + ": gradient of " + grads[i].first + ": " + why);
            f.add_cases(1);
          }
        } catch (const std::exception& e) {
          f.add(label + ": threw " + e.what());
        }
      });
    }
  }
}

Parallelize style(nn::StylePtr s) {
  return [s](const nn::ModulePtr& m, const DeviceMesh& mesh) { nn::parallelize_module(m, mesh, s); };
}
Parallelize plan(nn::ParallelPlan p) {
  return [p](const nn::ModulePtr& m, const DeviceMesh& mesh) { nn::parallelize_module(m, mesh, p); };
}

// gpt_tp_plan's entries for one block ("layers.*." dropped), applied to a TransformerBlock on its own.
nn::ParallelPlan block_plan(const nn::GptConfig& cfg, bool sp) {
  nn::ParallelPlan p;
  for (auto& [pattern, style] : nn::gpt_tp_plan(cfg, sp))
    if (pattern.rfind("layers.*.", 0) == 0) p.emplace_back(pattern.substr(9), style);
  return p;
}

nn::GptConfig gpt_config(bool tied) {
  nn::GptConfig c;
  c.vocab = 11;
  c.dim = 8;
  c.layers = 1;
  c.heads = 2;
  c.hidden = 12;
  c.tie_embeddings = tied;
  return c;
}

std::vector<Case> cases() {
  using nn::ColwiseParallel;
  using nn::RowwiseParallel;
  const nn::StylePtr seq_parallel = nn::SequenceParallel();
  std::vector<Case> v;
  v.push_back({"Linear",
               [] { return std::make_shared<nn::Linear>(4, 5, true, 0.5); },
               {3, 4},
               0,
               {{"colwise", style(ColwiseParallel())}, {"rowwise", style(RowwiseParallel())}}});
  v.push_back({"Embedding",
               [] { return std::make_shared<nn::Embedding>(7, 5, 0.5); },
               {2, 5},
               7,
               {{"colwise", style(ColwiseParallel())}, {"rowwise", style(RowwiseParallel())}}});
  v.push_back({"LayerNorm",
               [] { return std::make_shared<nn::LayerNorm>(6); },
               {2, 5, 6},
               0,
               {{"sequence parallel", style(seq_parallel)}}});
  v.push_back({"RMSNorm",
               [] { return std::make_shared<nn::RMSNorm>(6); },
               {2, 5, 6},
               0,
               {{"sequence parallel", style(seq_parallel)}}});
  v.push_back({"GeluMlp",
               [] { return std::make_shared<nn::GeluMlp>(4, 7, true); },
               {2, 3, 4},
               0,
               {{"megatron", plan({{"w1", ColwiseParallel()}, {"w2", RowwiseParallel()}})}}});
  v.push_back(
      {"SwiGluMlp",
       [] { return std::make_shared<nn::SwiGluMlp>(4, 7); },
       {2, 3, 4},
       0,
       {{"megatron", plan({{"w1", ColwiseParallel()}, {"w3", ColwiseParallel()}, {"w2", RowwiseParallel()}})}}});
  v.push_back({"Attention",
               [] { return std::make_shared<nn::Attention>(8, 2); },
               {2, 4, 8},
               0,
               {{"megatron", plan({{"wq", ColwiseParallel()},
                                   {"wk", ColwiseParallel()},
                                   {"wv", ColwiseParallel()},
                                   {"wo", RowwiseParallel()}})}}});
  // Grouped-query attention with a head_dim of its own, biases (Qwen2's q/k/v, Llama's o) and Llama 3 RoPE scaling.
  nn::AttentionOptions gqa;
  gqa.kv_heads = 2;
  gqa.head_dim = 6;
  gqa.qkv_bias = gqa.o_bias = true;
  gqa.rope_scaling =
      nn::RopeScaling{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 16};
  v.push_back({"Attention GQA",
               [gqa] { return std::make_shared<nn::Attention>(8, 4, gqa); },
               {2, 4, 8},
               0,
               {{"megatron", plan({{"wq", ColwiseParallel()},
                                   {"wk", ColwiseParallel()},
                                   {"wv", ColwiseParallel()},
                                   {"wo", RowwiseParallel()}})},
                {"kv replicated", plan({{"wq", ColwiseParallel()}, {"wo", RowwiseParallel()}})}}});
  const nn::GptConfig untied = gpt_config(false), tied = gpt_config(true);
  nn::GptConfig mqa = untied;  // one kv head: replicated over tp by the plan
  mqa.heads = 4;
  mqa.kv_heads = 1;
  mqa.head_dim = 4;
  mqa.qkv_bias = mqa.mlp_bias = true;
  nn::GptConfig gelu_block = untied;
  gelu_block.norm = nn::NormKind::kLayerNorm;
  gelu_block.mlp = nn::MlpKind::kGelu;
  v.push_back({"TransformerBlock",
               [] { return std::make_shared<nn::TransformerBlock>(8, 2, 12); },
               {2, 4, 8},
               0,
               {{"megatron", plan(block_plan(untied, false))}}});
  v.push_back(
      {"TransformerBlock layer norm gelu",
       [] { return std::make_shared<nn::TransformerBlock>(8, 2, 12, nn::NormKind::kLayerNorm, nn::MlpKind::kGelu); },
       {2, 4, 8},
       0,
       {{"megatron", plan(block_plan(gelu_block, false))}, {"megatron sp", plan(block_plan(gelu_block, true))}}});
  v.push_back({"Gpt untied",
               [untied] { return std::make_shared<nn::Gpt>(untied); },
               {2, 4},
               untied.vocab,
               {{"megatron", plan(nn::gpt_tp_plan(untied))}, {"megatron sp", plan(nn::gpt_tp_plan(untied, true))}}});
  v.push_back(
      {"Gpt multi-query",
       [mqa] { return std::make_shared<nn::Gpt>(mqa); },
       {2, 4},
       mqa.vocab,
       {{"megatron", plan(nn::gpt_tp_plan(mqa, false, 2))}, {"megatron sp", plan(nn::gpt_tp_plan(mqa, true, 2))}}});
  v.push_back({"Gpt tied",
               [tied] { return std::make_shared<nn::Gpt>(tied); },
               {2, 4},
               tied.vocab,
               {{"megatron", plan(nn::gpt_tp_plan(tied))}}});
  return v;
}

TEST(NnModuleGrad, FiniteDifferences) {
  Failures f;
  for (const Case& c : cases()) check_finite_differences(c, f);
  f.report(300);
}

TEST(NnModuleGrad, TensorParallelMatchesOneRank) {
  Failures f;
  for (const Case& c : cases()) check_tensor_parallel(c, f);
  f.report(100);
}

TEST(NnModuleGrad, MaterializeDtype) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    nn::Linear a(4, 3, true, 0.5), b(4, 3, true, 0.5);
    a.materialize(mesh, 9);
    b.materialize(mesh, 9, DType::f64);
    EXPECT_EQ(a.weight.dtype(), DType::f32);
    EXPECT_EQ(b.weight.dtype(), DType::f64);
    EXPECT_EQ(b.bias.dtype(), DType::f64);
    // The same draws, in another precision.
    std::string why;
    EXPECT_TRUE(op_test::compare(b.weight.full_tensor().to(DType::f32), a.weight.full_tensor(), true, &why)) << why;
  });
}

TEST(NnModuleGrad, DropoutModule) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    const Tensor xf = Tensor::rand({6, 10}, 1, DType::f64, 0.5, 1.5);
    Variable x(nn_test::replicate_on(xf, mesh));
    auto d = std::make_shared<nn::Dropout>(0.5, 42);
    // Each call draws another mask; set_seed restarts the stream.
    const Tensor y1 = (*d)(x).full_tensor(), y2 = (*d)(x).full_tensor();
    std::string why;
    EXPECT_FALSE(op_test::compare(y1, y2, true, &why)) << "two calls drew the same mask";
    d->set_seed(42);
    EXPECT_TRUE(op_test::compare((*d)(x).full_tensor(), y1, true, &why)) << why;
    EXPECT_TRUE(op_test::compare((*d)(x).full_tensor(), y2, true, &why)) << why;
    // The mask is nn::dropout's with the call's seed.
    d->set_seed(7);
    const uint64_t s = d->next_seed();
    EXPECT_TRUE(op_test::compare((*d)(x).full_tensor(), nn::dropout(x, 0.5, s).full_tensor(), true, &why)) << why;
    d->eval();
    EXPECT_TRUE(op_test::compare((*d)(x).full_tensor(), xf, true, &why)) << why;
    EXPECT_THROW(nn::Dropout(1.5), Error);
  });
}

// A module with dropout between two linears, checkpointed: the recompute in backward must draw the forward's masks,
// also when the module ran again (advancing the dropout's counter) before the backward.
struct DropMlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  DropMlp() : Module("DropMlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(5, 6, true, 0.5));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5, 11));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(6, 3, true, 0.5));
  }
  std::vector<Variable> forward(const std::vector<Variable>& in) override {
    return {(*fc2)((*drop)(nn::tanh((*fc1)(in.at(0)))))};
  }
};

TEST(NnModuleGrad, DropoutUnderCheckpointing) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    const Tensor xf = Tensor::rand({4, 5}, 2, DType::f64, -1, 1);
    std::vector<std::vector<Tensor>> grads;
    for (bool ckpt : {false, true}) {
      auto m = std::make_shared<DropMlp>();
      m->materialize(mesh, 4, DType::f64);
      m->set_activation_checkpointing(ckpt);
      Variable x(nn_test::replicate_on(xf, mesh), true);
      Variable first = weighted_sum((*m)(x));
      Variable second = weighted_sum((*m)(x));  // another mask, advancing the counter
      (void)second;
      first.backward();
      std::vector<Tensor> g{x.grad().full_tensor()};
      for (const Variable& p : m->parameters()) g.push_back(p.grad().full_tensor());
      grads.push_back(g);
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      std::string why;
      EXPECT_TRUE(op_test::compare(grads[1][i], grads[0][i], false, &why)) << "gradient " << i << ": " << why;
    }
  });
}

}  // namespace
}  // namespace dt
