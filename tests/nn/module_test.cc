// Modules: PyTorch names, tied weights, state dicts, initialization independent of the mesh, hook order,
// activation checkpointing, gradient delivery (deliver_grad, grad sinks), and the errors a user meets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

nn::GptConfig tiny(bool tied = false) {
  nn::GptConfig c;
  c.vocab = 11;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.hidden = 12;
  c.tie_embeddings = tied;
  return c;
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(NnModule, GptNamesAreTorchtitans) {
  nn::Gpt m(tiny());
  std::vector<std::string> want{"tok_embeddings.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"attention_norm.weight", "attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                          "attention.wo.weight", "ffn_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                          "feed_forward.w3.weight"})
      want.push_back(p + n);
  }
  want.push_back("norm.weight");
  want.push_back("output.weight");
  EXPECT_EQ(names(m), want);
  nn::Gpt tied(tiny(true));
  want.pop_back();
  EXPECT_EQ(names(tied), want);  // the tied head appears once, under tok_embeddings.weight
  // The declared element count, before anything is allocated, is what materialize() allocates (tied weights once).
  EXPECT_LT(tied.declared_numel(), m.declared_numel());
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    for (nn::Gpt* g : {&m, &tied}) {
      const int64_t declared = g->declared_numel();
      EXPECT_EQ(g->num_parameters(), 0);
      g->materialize(mesh, 0);
      EXPECT_EQ(g->num_parameters(), declared);
      EXPECT_GT(declared, 0);
    }
  });
}

TEST(NnModule, RegistrationErrors) {
  nn::Linear lin(3, 4);
  EXPECT_THROW(lin.register_parameter("weight", {1}, nn::Init::zeros()), InvalidArgument);
  EXPECT_THROW(lin.register_parameter("a.b", {1}, nn::Init::zeros()), InvalidArgument);
  EXPECT_THROW(lin.register_parameter("", {1}, nn::Init::zeros()), InvalidArgument);
  auto gpt = std::make_shared<nn::Gpt>(tiny());
  EXPECT_THROW(gpt->get_submodule("layers.7.attention"), InvalidArgument);
  EXPECT_THROW(gpt->get_parameter("layers.0.attention.wq.bias"), InvalidArgument);
  EXPECT_NO_THROW(gpt->get_parameter("layers.1.feed_forward.w3.weight"));
}

TEST(NnModule, InitializationDoesNotDependOnTheMesh) {
  // The same model on one rank and tensor-parallel on [2] and [3]: bit for bit the same global parameters.
  std::vector<std::pair<std::string, Tensor>> ref;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    auto m = std::make_shared<nn::Gpt>(tiny());
    m->materialize(mesh, 7);
    for (auto& [n, p] : m->named_parameters()) ref.emplace_back(n, p.full_tensor());
  });
  for (int64_t tp : {2, 3}) {
    op_test::Failures f;
    op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
      auto m = std::make_shared<nn::Gpt>(tiny());
      nn::parallelize_module(m, mesh, nn::gpt_tp_plan(m->config));
      m->materialize(mesh, 7);
      auto ps = m->named_parameters();
      ASSERT_EQ(ps.size(), ref.size());
      for (size_t i = 0; i < ps.size(); ++i) {
        if (!equal(ps[i].second.full_tensor(), ref[i].second))
          f.add(ps[i].first + " differs on tp " + std::to_string(tp));
        f.add_cases(1);
      }
      EXPECT_TRUE(is_shard(m->get_parameter("layers.0.attention.wq.weight").placements()[0], 0));
      EXPECT_TRUE(is_shard(m->get_parameter("layers.0.attention.wo.weight").placements()[0], 1));
      EXPECT_TRUE(is_shard(m->get_parameter("tok_embeddings.weight").placements()[0], 0));
    });
    f.report(1);
  }
}

// The sample std of a parameter and its largest magnitude.
std::pair<double, double> spread(const Variable& p) {
  std::vector<double> v = p.full_tensor().to_vector();
  double sq = 0, top = 0;
  for (double x : v) {
    sq += x * x;
    top = std::max(top, std::abs(x));
  }
  return {std::sqrt(sq / double(v.size())), top};
}

TEST(NnModule, GptInitSchemes) {
  // The std of Normal(0, s) truncated at +-c s is s sqrt(1 - 2 c phi(c) / (2 Phi(c) - 1)) (closed form).
  auto truncated_std = [](double s, double c) {
    if (c == 0) return s;
    const double phi = std::exp(-c * c / 2) / std::sqrt(2 * M_PI), mass = std::erf(c / std::sqrt(2.0));
    return s * std::sqrt(1 - 2 * c * phi / mass);
  };
  struct Scheme {
    nn::GptInit init;
    const char* label;
  };
  const int64_t layers = 3;
  for (const Scheme& k : {Scheme{{0.02, 0, nn::DepthScaling::kNone}, "GPT-2 default"},
                          Scheme{{0.05, 2, nn::DepthScaling::kDepth}, "truncated at 2, depth"},
                          Scheme{{0.03, 3, nn::DepthScaling::kLayers}, "truncated at 3, layers"}}) {
    SCOPED_TRACE(k.label);
    op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
      nn::GptConfig c = tiny();
      c.dim = 64, c.hidden = 128, c.vocab = 97, c.layers = layers, c.heads = 4;
      c.init = k.init;
      auto m = std::make_shared<nn::Gpt>(c);
      m->materialize(mesh, 3);
      for (auto& [name, p] : m->named_parameters()) {
        const auto [std, top] = spread(p);
        if (name.find("norm") != std::string::npos) {
          EXPECT_EQ(std, 1.0) << name;  // ones
          continue;
        }
        double s = k.init.std;
        const bool out = name.find("attention.wo") != std::string::npos || name.find("w2") != std::string::npos;
        const int64_t l = name.rfind("layers.", 0) == 0 ? std::stoll(name.substr(7)) : 0;
        if (out && k.init.depth == nn::DepthScaling::kDepth) s /= std::sqrt(2.0 * double(l + 1));
        if (out && k.init.depth == nn::DepthScaling::kLayers) s /= std::sqrt(2.0 * double(layers));
        // At least 4096 draws: the sample std is within 6 % (over 5 standard errors).
        EXPECT_NEAR(std, truncated_std(s, k.init.cutoff), 0.06 * s) << name;
        if (k.init.cutoff > 0) {
          EXPECT_LE(top, k.init.cutoff * s * (1 + 1e-6)) << name;
        }
      }
      EXPECT_THROW(m->layers[0]->attention->wq->set_parameter_init("weight", nn::Init::zeros()), InvalidArgument);
    });
  }
  nn::GptConfig bad = tiny();
  bad.init.std = -1;
  EXPECT_THROW(nn::Gpt{bad}, InvalidArgument);
}

TEST(NnModule, StateDictRoundTrip) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    auto a = std::make_shared<nn::Gpt>(tiny());
    auto b = std::make_shared<nn::Gpt>(tiny());
    nn::parallelize_module(b, mesh, nn::gpt_tp_plan(b->config));  // a replicated, b sharded: values move across
    a->materialize(mesh, 1);
    b->materialize_empty(mesh);  // allocated in its layout, not filled: load_state_dict fills it
    EXPECT_TRUE(b->materialized());
    EXPECT_TRUE(is_shard(b->get_parameter("layers.0.attention.wq.weight").placements()[0], 0));
    Variable wq = b->get_parameter("layers.0.attention.wq.weight");
    const void* before = wq.to_local().data<float>();
    b->load_state_dict(a->state_dict());
    EXPECT_EQ(wq.to_local().data<float>(), before);  // loaded in place: handles and storage stay
    for (auto& [n, v] : a->state_dict()) EXPECT_TRUE(equal(b->get_parameter(n).full_tensor(), v.full_tensor())) << n;
    nn::StateDict partial = a->state_dict();
    partial.pop_back();
    partial.emplace_back("layers.9.nothing", partial.front().second);
    try {
      b->load_state_dict(partial);
      ADD_FAILURE() << "a state dict missing output.weight loaded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("output.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("layers.9.nothing"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(b->load_state_dict(partial, /*strict=*/false));
  });
}

// A module that logs its hooks.
struct Logged : nn::Module {
  std::shared_ptr<nn::Linear> lin;
  Logged() : Module("Logged") { lin = register_module("lin", std::make_shared<nn::Linear>(3, 3)); }
  std::vector<Variable> forward(const std::vector<Variable>& in) override { return {nn::tanh((*lin)(in[0]))}; }
};

TEST(NnModule, HookOrder) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    std::vector<std::string> log;
    auto a = std::make_shared<Logged>(), b = std::make_shared<Logged>();
    a->materialize(mesh, 1);
    b->materialize(mesh, 2);
    for (auto [name, m] : {std::pair{"a", a}, std::pair{"b", b}}) {
      std::string n = name;
      m->register_forward_pre_hook([&log, n](nn::Module&, const std::vector<Variable>&) {
        log.push_back(n + " pre-forward");
        return std::optional<std::vector<Variable>>();
      });
      m->register_forward_hook([&log, n](nn::Module&, const std::vector<Variable>&, const std::vector<Variable>&) {
        log.push_back(n + " forward");
        return std::optional<std::vector<Variable>>();
      });
      m->register_backward_pre_hook([&log, n](nn::Module&) { log.push_back(n + " pre-backward"); });
      m->register_backward_hook([&log, n](nn::Module&) { log.push_back(n + " backward"); });
      m->lin->weight.register_post_accumulate_grad_hook(
          [&log, n](Variable& w) { log.push_back(n + " weight grad " + (w.grad().defined() ? "ready" : "missing")); });
    }
    Variable x(nn_test::replicate_on(Tensor::randn({2, 3}, 3), mesh));
    Variable y = (*b)((*a)(x));
    y.grad_fn()->add_pre_hook([&] { nn::queue_callback([&] { log.push_back("end of backward"); }); });
    nn::sum(y).backward();
    const std::vector<std::string> want{"a pre-forward",       "a forward",           "b pre-forward", "b forward",
                                        "b pre-backward",      "b weight grad ready", "b backward",    "a pre-backward",
                                        "a weight grad ready", "end of backward",     "a backward"};
    // a's input needs no gradient: its backward hooks run from an end-of-backward callback, queued (by its
    // pre-backward hook) after the one this test queued first.
    EXPECT_EQ(log, want);
  });
}

TEST(NnModule, CheckpointingGivesTheSameGradients) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    std::vector<Tensor> grads[2];
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      auto m = std::make_shared<nn::Gpt>(tiny());
      nn::parallelize_module(m, mesh, nn::gpt_tp_plan(m->config));
      for (auto& blk : m->layers) blk->set_activation_checkpointing(ckpt == 1);
      m->materialize(mesh, 3);
      Tensor ids = Tensor::rand({2, 6}, 9, DType::i64, 0, 11);
      DTensor rep = nn_test::replicate_on(ids.to(DType::i64), mesh);
      Variable logits = (*m)(Variable(rep));
      nn::cross_entropy(logits, rep).backward();
      for (auto& [n, p] : m->named_parameters()) grads[ckpt].push_back(p.grad().full_tensor());
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      std::string why;
      EXPECT_TRUE(op_test::compare(grads[1][i], grads[0][i], false, &why)) << i << ": " << why;
    }
  });
}

TEST(NnModule, PlanErrors) {
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& unnamed) {
    DeviceMesh mesh = DeviceMesh::create(unnamed.world(), Device::cpu(), {2, 2}, {"dp", "tp"});
    auto m = std::make_shared<nn::Gpt>(tiny());
    try {
      nn::parallelize_module(m, mesh["tp"], {{"layers.*.attn.wq", nn::ColwiseParallel()}});
      ADD_FAILURE() << "a plan naming no module was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("layers.*.attn.wq"), std::string::npos) << e.what();
    }
    EXPECT_THROW(nn::parallelize_module(m, mesh["tp"], {{"norm", nn::ColwiseParallel()}}), InvalidArgument);
    EXPECT_THROW(nn::parallelize_module(m, mesh["tp"], {{"layers.0.attention.wq", nn::SequenceParallel()}}),
                 InvalidArgument);
    EXPECT_THROW(nn::parallelize_module(m, mesh, nn::gpt_tp_plan(m->config)), InvalidArgument);  // a 2-d mesh
  });
}

// input_layouts, when given, are checked: an input that arrives with other placements names the module, both
// placements and the style; without them (and for a declared layout that matches) the input is redistributed to
// what the module computes on, and the result equals one rank's.
TEST(NnModule, PlanInputLayoutsAreChecked) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    const Tensor x = Tensor::randn({4, 6}, 3);
    auto make = [&](nn::StylePtr style) {
      auto lin = std::make_shared<nn::Linear>(6, 5);
      nn::parallelize_module(lin, mesh, style);
      lin->materialize(mesh, 9);
      return lin;
    };
    Variable rep(nn_test::replicate_on(x, mesh)), sharded(distribute_tensor(x, mesh, {Shard{1}}));
    auto declared = make(nn::ColwiseParallel({.input_layouts = Placement(Shard{1}), .output_layouts = std::nullopt}));
    try {
      (*declared)(rep);
      ADD_FAILURE() << "an input arriving Replicate was taken by a style that declares Shard(1)";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      for (const char* part : {"ColwiseParallel", "declares its input S(1)", "arrived R"})
        EXPECT_NE(m.find(part), std::string::npos) << m;
    }
    auto any = make(nn::ColwiseParallel());
    std::string why;
    const Tensor want = (*any)(rep).full_tensor();
    EXPECT_TRUE(op_test::compare((*declared)(sharded).full_tensor(), want, false, &why)) << why;
    EXPECT_TRUE(op_test::compare((*any)(sharded).full_tensor(), want, false, &why)) << why;
    auto prepared = std::make_shared<nn::Linear>(6, 5);
    nn::parallelize_module(prepared, mesh, nn::PrepareModuleInput({Placement(Replicate{})}, {Placement(Shard{0})}));
    prepared->materialize(mesh, 9);
    EXPECT_THROW((*prepared)(sharded), InvalidArgument);
    EXPECT_EQ((*prepared)(rep).placements()[0], Placement(Shard{0}));
  });
}

TEST(NnModule, OptimizerRefusesAParameterResharded) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    Variable w(nn_test::replicate_on(Tensor::randn({4, 3}, 1), mesh), true);
    nn::AdamW opt({w});
    nn::sum(nn::mul(w, w)).backward();
    opt.step();
    w.set_data(w.data().redistribute({Shard{0}}));
    w.zero_grad();
    nn::sum(nn::mul(w, w)).backward();
    try {
      opt.step();
      ADD_FAILURE() << "the optimizer stepped a parameter whose placements changed";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("after sharding"), std::string::npos) << e.what();
    }
  });
}

TEST(NnAutograd, Errors) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    Variable x(nn_test::replicate_on(Tensor::randn({2, 3}, 1), mesh), true);
    Variable y = nn::mul(x, x);
    EXPECT_THROW(y.backward(), InvalidArgument);  // not a scalar and no gradient given
    Variable s = nn::sum(y);
    s.backward();
    EXPECT_THROW(s.backward(), InvalidArgument);  // the graph was freed
    Variable c(nn_test::replicate_on(Tensor::randn({2}, 1), mesh));
    EXPECT_THROW(nn::sum(c).backward(), InvalidArgument);  // nothing requires grad
    EXPECT_THROW(nn::queue_callback([] {}), InvalidArgument);
    {
      nn::NoGradGuard no_grad;
      EXPECT_FALSE(nn::mul(x, x).requires_grad());
    }
    Variable r = nn::sum(nn::mul(x, 3.0));
    r.backward(DTensor(), /*retain_graph=*/true);
    r.backward();
    // d/dx of sum(x * x) (2x), then twice d/dx of sum(3x) (3 each): accumulated.
    Tensor xs = x.full_tensor().to(DType::f64), want = Tensor::empty({2, 3}, DType::f64);
    for (int64_t i = 0; i < 6; ++i) want.data<double>()[i] = 2 * xs.data<double>()[i] + 6;
    std::string why;
    EXPECT_TRUE(op_test::compare(x.grad().full_tensor(), want.to(DType::f32), false, &why)) << why;
  });
}

// The one way a gradient reaches .grad(): deliver_grad brings it to the leaf's layout (a Replicate gradient of a
// parameter sharded unevenly over 3 ranks arrives as that parameter's shards) and accumulates; a grad sink takes the
// backward's gradient instead, and its owner delivers it (as FSDP's group does once it reduced it).
Tensor scaled(const Tensor& t, double k) {
  Tensor d = t.to(DType::f64).contiguous(), out = Tensor::empty(t.shape(), DType::f64);
  for (int64_t i = 0; i < d.numel(); ++i) out.data<double>()[i] = k * d.data<double>()[i];
  return out.to(t.dtype());
}

TEST(NnAutograd, GradientDelivery) {
  op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
    const Tensor full = Tensor::randn({5, 2}, 11);  // 5 rows over 3 ranks: 2, 2, 1
    Variable w(distribute_tensor(full, mesh, {Shard{0}}), true);
    int hooks = 0;
    w.register_post_accumulate_grad_hook([&](Variable&) { ++hooks; });
    const Tensor g = Tensor::randn({5, 2}, 12);
    w.deliver_grad(nn_test::replicate_on(g, mesh));
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().placements(), w.placements());
    std::string why;
    EXPECT_TRUE(op_test::compare(w.grad().full_tensor(), g, false, &why)) << why;
    w.deliver_grad(nn_test::replicate_on(g, mesh));  // accumulated: 2g
    EXPECT_TRUE(op_test::compare(w.grad().full_tensor(), scaled(g, 2.0), false, &why)) << why;
    EXPECT_EQ(hooks, 2);

    // A sink: backward hands it the gradient of sum(w * w) (2w) and leaves .grad() alone until the owner delivers.
    w.zero_grad();
    std::vector<DTensor> sunk;
    w.set_grad_sink([&](const DTensor& grad) { sunk.push_back(grad); });
    nn::sum(nn::mul(w, w)).backward();
    ASSERT_EQ(sunk.size(), 1u);
    EXPECT_FALSE(w.grad().defined());
    EXPECT_EQ(hooks, 2);
    EXPECT_TRUE(op_test::compare(sunk[0].full_tensor(), scaled(full, 2.0), false, &why)) << why;
    w.deliver_grad(sunk[0]);
    EXPECT_TRUE(op_test::compare(w.grad().full_tensor(), scaled(full, 2.0), false, &why)) << why;
    EXPECT_EQ(hooks, 3);

    // An empty sink restores the default: backward accumulates into .grad() itself.
    w.set_grad_sink(nullptr);
    nn::sum(nn::mul(w, w)).backward();
    EXPECT_EQ(sunk.size(), 1u);
    EXPECT_TRUE(op_test::compare(w.grad().full_tensor(), scaled(full, 4.0), false, &why)) << why;
    EXPECT_EQ(hooks, 4);
    // Leaves only.
    Variable y = nn::mul(w, 2.0);
    EXPECT_THROW(y.deliver_grad(nn_test::replicate_on(g, mesh)), InvalidArgument);
  });
}

}  // namespace
}  // namespace dt
