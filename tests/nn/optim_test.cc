// Optimizers on sharded parameters against PyTorch's formulas computed here on full tensors (double), exact
// global-norm clipping across shards and meshes, and the warmup + cosine schedule.
#include "nn/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "nn/autograd.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

// Reference AdamW / SGD on full f64 vectors (torch.optim's single-tensor update, written out).
struct RefAdamW {
  std::vector<double> m, v;
  int64_t t = 0;
  void step(std::vector<double>& p, const std::vector<double>& g, const nn::AdamWOptions& o) {
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(o.beta1, double(t)));
      const double vhat = v[i] / (1 - std::pow(o.beta2, double(t)));
      p[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    }
  }
};
struct RefSgd {
  std::vector<double> buf;
  void step(std::vector<double>& p, const std::vector<double>& g, const nn::SgdOptions& o) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + o.weight_decay * p[i];
      if (o.momentum > 0) {
        buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * d;
    }
  }
};

std::vector<double> values(const Tensor& t) {
  Tensor x = t.to(DType::f64).contiguous();
  return std::vector<double>(x.data<double>(), x.data<double>() + x.numel());
}

// Loss sum(w * c) for a fixed c: the gradient is c every step (known exactly, so the reference needs no autograd).
template <typename Opt, typename Ref, typename Options>
void check_optimizer(const char* name, const Options& o, op_test::Failures& f) {
  const Shape shape{5, 3};
  const Tensor w0 = Tensor::randn(shape, 1, DType::f32), c = Tensor::randn(shape, 2, DType::f32);
  std::vector<double> want = values(w0);
  Ref ref;
  for (int step = 0; step < 3; ++step) ref.step(want, values(c), o);
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const ShardingSpec& spec : op_test::specs_for(2, mesh.ndim(), {})) {
        Variable w(nn_test::replicate_on(w0, mesh).redistribute(spec), true);
        DTensor cd = nn_test::replicate_on(c, mesh).redistribute(spec);
        Opt opt({w}, o);
        for (int step = 0; step < 3; ++step) {
          nn::sum(nn::mul(w, Variable(cd))).backward();
          opt.step();
          opt.zero_grad();
        }
        std::vector<double> got = values(w.full_tensor());
        for (size_t i = 0; i < got.size(); ++i)
          if (std::abs(got[i] - want[i]) > 1e-5 * (1 + std::abs(want[i]))) {
            f.add(std::string(name) + " " + spec.to_string() + " on " + mesh.to_string() + ": element " +
                  std::to_string(i) + " is " + std::to_string(got[i]) + ", reference " + std::to_string(want[i]));
            break;
          }
        for (auto& [k, s] : opt.state(w))
          if (!(s.spec() == w.spec())) f.add(std::string(name) + ": state " + k + " is " + s.spec().to_string());
        f.add_cases(1);
      }
    });
  }
}

TEST(NnOptim, AdamWMatchesTheFormula) {
  op_test::Failures f;
  check_optimizer<nn::AdamW, RefAdamW>(
      "AdamW", nn::AdamWOptions{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1}, f);
  f.report(30);
}

TEST(NnOptim, SgdMatchesTheFormula) {
  op_test::Failures f;
  check_optimizer<nn::SGD, RefSgd>(
      "SGD", nn::SgdOptions{.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0.01, .nesterov = false}, f);
  check_optimizer<nn::SGD, RefSgd>(
      "SGD momentum",
      nn::SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0, .nesterov = false}, f);
  check_optimizer<nn::SGD, RefSgd>(
      "SGD nesterov",
      nn::SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = true}, f);
  f.report(90);
}

TEST(NnOptim, ClipGradNormIsExactAcrossShardsAndMeshes) {
  // Three parameters: sharded on a 1-d sub-mesh, sharded on both dims of the 2x2 mesh, replicated; gradients set
  // directly. The norm must equal the one of the full gradients, and clipping scales every shard alike.
  const Tensor g1 = Tensor::randn({5, 3}, 3), g2 = Tensor::randn({7, 2}, 4), g3 = Tensor::randn({4}, 5);
  double want = 0;
  for (const Tensor& g : {g1, g2, g3})
    for (double x : values(g)) want += x * x;
  want = std::sqrt(want);
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& unnamed) {
    DeviceMesh mesh = DeviceMesh::create(unnamed.world(), Device::cpu(), {2, 2}, {"dp", "tp"});
    DeviceMesh tp = mesh["tp"];
    std::vector<Variable> ps;
    auto add = [&](const Tensor& g, const DeviceMesh& m, std::vector<Placement> pl) {
      DTensor d = nn_test::replicate_on(g, m).redistribute(pl);
      Variable v(nn::zeros_like(d), true);
      v.set_grad(d);
      ps.push_back(v);
    };
    add(g1, tp, {Shard{0}});
    add(g2, mesh, {Shard{0}, Shard{1}});
    add(g3, mesh, {Replicate{}, Replicate{}});
    EXPECT_NEAR(nn::grad_norm(ps), want, 1e-9 * want);
    const double before = nn::clip_grad_norm_(ps, want / 4);
    EXPECT_NEAR(before, want, 1e-9 * want);
    EXPECT_NEAR(nn::grad_norm(ps), want / 4, 1e-5 * want);
    std::vector<double> a = values(ps[1].grad().full_tensor()), b = values(g2);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i] / 4, 1e-5);
  });
}

TEST(NnOptim, BadOptions) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    Variable w(nn_test::replicate_on(Tensor::randn({3}, 1), mesh), true);
    EXPECT_THROW(nn::AdamW({w}, {.lr = -1}), InvalidArgument);
    EXPECT_THROW(nn::AdamW({w}, {.lr = 1e-3, .beta1 = 1.0}), InvalidArgument);
    EXPECT_THROW(nn::SGD({w}, {.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = true}),
                 InvalidArgument);
    Variable not_leaf = nn::mul(w, 2.0);
    EXPECT_THROW(nn::SGD({not_leaf}), InvalidArgument);
    EXPECT_THROW(nn::clip_grad_norm_({w}, 0.0), InvalidArgument);
  });
}

}  // namespace
}  // namespace dt
