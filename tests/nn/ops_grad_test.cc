// Every differentiable op of nn/ops.h: autograd against f64 finite differences on one rank, and the distributed
// gradients (every input placement on [2], [3], [2, 2], uneven and empty shards) against one rank.
#include <gtest/gtest.h>

#include <tuple>

#include "collectives/thread/thread_comm.h"
#include "dtensor/comm_counter.h"
#include "dtensor/factory.h"
#include "nn/autograd.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;
using nn_test::check_op;
using nn_test::GradInput;
using op_test::Failures;
using V = std::vector<Variable>;

TEST(NnGrad, Pointwise) {
  Failures f;
  check_op(
      "add broadcast", {{{5, 3}}, {{3}}}, [](const V& x) { return nn::add(x[0], x[1]); }, f);
  check_op(
      "sub broadcast", {{{5, 1}}, {{5, 3}}}, [](const V& x) { return nn::sub(x[0], x[1]); }, f);
  check_op(
      "mul", {{{2, 5}}, {{2, 5}}}, [](const V& x) { return nn::mul(x[0], x[1]); }, f);
  check_op(
      "div", {{{5, 3}}, {{5, 3}, 0.5, 2}}, [](const V& x) { return nn::div(x[0], x[1]); }, f);
  check_op(
      "pow", {{{3, 4}, 0.5, 2}, {{4}, -1, 2}}, [](const V& x) { return nn::pow(x[0], x[1]); }, f);
  check_op(
      "maximum", {{{5, 3}}, {{5, 3}}}, [](const V& x) { return nn::maximum(x[0], x[1]); }, f);
  check_op(
      "minimum", {{{5, 3}}, {{3}}}, [](const V& x) { return nn::minimum(x[0], x[1]); }, f);
  check_op(
      "scalar ops", {{{5, 3}}},
      [](const V& x) { return nn::div(nn::mul(nn::rsub(nn::sub(nn::add(x[0], 1.5), 0.25), 2.0), -3.0), 4.0); }, f);
  check_op(
      "pow scalar", {{{5, 3}, 0.5, 2}}, [](const V& x) { return nn::pow(x[0], 2.5); }, f);
  f.report(100);
}

TEST(NnGrad, Unary) {
  Failures f;
  check_op(
      "neg", {{{5, 3}}}, [](const V& x) { return nn::neg(x[0]); }, f);
  check_op(
      "abs", {{{5, 3}, 0.1, 2}}, [](const V& x) { return nn::abs(nn::neg(x[0])); }, f);
  check_op(
      "relu", {{{5, 3}}}, [](const V& x) { return nn::relu(x[0]); }, f);
  check_op(
      "exp", {{{5, 3}}}, [](const V& x) { return nn::exp(x[0]); }, f);
  check_op(
      "log", {{{5, 3}, 0.5, 3}}, [](const V& x) { return nn::log(x[0]); }, f);
  check_op(
      "sqrt", {{{5, 3}, 0.5, 3}}, [](const V& x) { return nn::sqrt(x[0]); }, f);
  check_op(
      "rsqrt", {{{5, 3}, 0.5, 3}}, [](const V& x) { return nn::rsqrt(x[0]); }, f);
  check_op(
      "tanh", {{{5, 3}}}, [](const V& x) { return nn::tanh(x[0]); }, f);
  check_op(
      "sigmoid", {{{5, 3}}}, [](const V& x) { return nn::sigmoid(x[0]); }, f);
  check_op(
      "silu", {{{5, 3}}}, [](const V& x) { return nn::silu(x[0]); }, f);
  check_op(
      "gelu", {{{5, 3}}}, [](const V& x) { return nn::gelu(x[0]); }, f);
  check_op(
      "gelu tanh", {{{5, 3}}}, [](const V& x) { return nn::gelu(x[0], GeluApprox::kTanh); }, f);
  f.report(100);
}

TEST(NnGrad, MaskedAndWhere) {
  Failures f;
  auto mask = [](const Variable& like) { return dt::gt(like.data(), 0.3); };
  check_op(
      "masked_fill", {{{5, 3}}, {{5, 3}, -1, 1, false}},
      [&](const V& x) { return nn::masked_fill(x[0], mask(x[1]), 7.0); }, f);
  check_op(
      "where", {{{5, 3}}, {{3}}, {{5, 3}, -1, 1, false}}, [&](const V& x) { return nn::where(mask(x[2]), x[0], x[1]); },
      f);
  f.report(50);
}

TEST(NnGrad, MatrixProducts) {
  Failures f;
  check_op(
      "matmul 2d", {{{5, 3}}, {{3, 4}}}, [](const V& x) { return nn::matmul(x[0], x[1]); }, f);
  check_op(
      "matmul batched", {{{2, 3, 4}}, {{4, 5}}}, [](const V& x) { return nn::matmul(x[0], x[1]); }, f);
  check_op(
      "matmul 4d", {{{2, 3, 4, 2}}, {{2, 3, 2, 3}}}, [](const V& x) { return nn::matmul(x[0], x[1]); }, f);
  check_op(
      "matmul vec", {{{3}}, {{3, 4}}}, [](const V& x) { return nn::matmul(x[0], x[1]); }, f);
  check_op(
      "matmul mat-vec", {{{5, 3}}, {{3}}}, [](const V& x) { return nn::matmul(x[0], x[1]); }, f);
  check_op(
      "linear", {{{5, 3}}, {{4, 3}}, {{4}}}, [](const V& x) { return nn::linear(x[0], x[1], x[2]); }, f);
  check_op(
      "linear 3d no bias", {{{2, 3, 4}}, {{5, 4}}}, [](const V& x) { return nn::linear(x[0], x[1]); }, f);
  f.report(100);
}

TEST(NnGrad, Views) {
  Failures f;
  check_op(
      "reshape", {{{6, 4}}},
      [](const V& x) {
        return nn::reshape(x[0], {3, 8});
      },
      f);
  check_op(
      "flatten/unflatten", {{{2, 3, 4}}},
      [](const V& x) {
        return nn::unflatten(nn::flatten(x[0], 1, 2), 1, {4, 3});
      },
      f);
  check_op(
      "transpose", {{{5, 3}}}, [](const V& x) { return nn::transpose(x[0], 0, 1); }, f);
  check_op(
      "permute", {{{2, 3, 4}}},
      [](const V& x) {
        return nn::permute(x[0], {2, 0, 1});
      },
      f);
  check_op(
      "unsqueeze/squeeze", {{{5, 3}}}, [](const V& x) { return nn::squeeze(nn::unsqueeze(x[0], 1), 1); }, f);
  check_op(
      "narrow", {{{5, 6}}}, [](const V& x) { return nn::narrow(x[0], 1, 1, 3); }, f);
  check_op(
      "cat", {{{5, 3}}, {{5, 2}}},
      [](const V& x) {
        return nn::cat({x[0], x[1]}, 1);
      },
      f);
  check_op(
      "split", {{{5, 3}}},
      [](const V& x) {
        V parts = nn::split(x[0], {2, 3}, 0);
        return nn::mul(parts[1], 2.0);  // parts[0] unused: its gradient is zero
      },
      f);
  check_op(
      "tril", {{{4, 5}}}, [](const V& x) { return nn::tril(x[0], 1); }, f);
  check_op(
      "triu", {{{4, 5}}}, [](const V& x) { return nn::triu(x[0]); }, f);
  f.report(100);
}

TEST(NnGrad, BroadcastStackSlice) {
  Failures f;
  check_op(
      "expand size-1 dim", {{{5, 1}}},
      [](const V& x) {
        return nn::expand(x[0], {5, 3});
      },
      f);
  check_op(
      "expand new dims", {{{1, 3}}},
      [](const V& x) {
        return nn::expand(x[0], {2, 4, 3});
      },
      f);
  check_op(
      "expand -1 keeps", {{{5, 3}}},
      [](const V& x) {
        return nn::expand(x[0], {2, -1, -1});
      },
      f);
  check_op(
      "stack dim 0", {{{5, 3}}, {{5, 3}}},
      [](const V& x) {
        return nn::stack({x[0], x[1]}, 0);
      },
      f);
  check_op(
      "stack dim -1", {{{5, 3}}, {{5, 3}}, {{5, 3}}},
      [](const V& x) {
        return nn::stack({x[0], x[1], x[2]}, -1);
      },
      f);
  check_op(
      "stack reused input", {{{5, 3}}},
      [](const V& x) {
        return nn::stack({x[0], x[0]}, 1);
      },
      f);
  check_op(
      "slice", {{{7, 3}}}, [](const V& x) { return nn::slice(x[0], 0, 1, 6); }, f);
  check_op(
      "slice step", {{{4, 7}}}, [](const V& x) { return nn::slice(x[0], 1, 1, 7, 2); }, f);
  check_op(
      "slice negative bounds", {{{7, 3}}}, [](const V& x) { return nn::slice(x[0], -2, -5, -1, 3); }, f);
  check_op(
      "slice empty", {{{7, 3}}}, [](const V& x) { return nn::slice(x[0], 0, 4, 4); }, f);
  f.report(100);
}

// Integer indices in [0, n) drawn from a non-differentiable input in [-2, 2].
DTensor index_of(const Variable& like, int64_t n) {
  return dt::to(dt::mul(dt::add(like.data(), 2.0), double(n) / 4.0 - 1e-9), DType::i64);
}

TEST(NnGrad, IndexSelectAndGather) {
  Failures f;
  // Repeated indices: the gradient adds up.
  check_op(
      "index_select dim 0", {{{7, 3}}, {{9}, -2, 2, false}},
      [](const V& x) { return nn::index_select(x[0], 0, index_of(x[1], 7)); }, f);
  check_op(
      "index_select dim 1", {{{4, 6}}, {{5}, -2, 2, false}},
      [](const V& x) { return nn::index_select(x[0], 1, index_of(x[1], 6)); }, f);
  check_op(
      "index_select empty index", {{{4, 6}}, {{0}, -2, 2, false}},
      [](const V& x) { return nn::index_select(x[0], -1, index_of(x[1], 6)); }, f);
  check_op(
      "gather dim 1", {{{5, 4}}, {{5, 6}, -2, 2, false}},
      [](const V& x) { return nn::gather(x[0], 1, index_of(x[1], 4)); }, f);
  check_op(
      "gather dim 0 smaller index", {{{6, 4}}, {{3, 2}, -2, 2, false}},
      [](const V& x) { return nn::gather(x[0], 0, index_of(x[1], 6)); }, f);
  f.report(100);
}

TEST(NnGrad, Dropout) {
  Failures f;
  for (double p : {0.0, 0.3, 1.0})
    check_op(
        "dropout p " + std::to_string(p), {{{7, 5}}}, [p](const V& x) { return nn::dropout(x[0], p, 77); }, f);
  check_op(
      "dropout eval", {{{7, 5}}}, [](const V& x) { return nn::dropout(x[0], 0.5, 77, false); }, f);
  // The gradient is the forward's mask times 1 / (1 - p), and the mask is the same on every mesh and placement
  // (check_distributed compares the outputs' losses and gradients with one rank's).
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    const double p = 0.4;
    Variable x(nn_test::replicate_on(Tensor::rand({40, 30}, 5, DType::f64, 0.5, 2), mesh), true);
    Variable y = nn::dropout(x, p, 123);
    nn::sum(y).backward();
    Tensor xf = x.full_tensor(), yf = y.full_tensor(), g = x.grad().full_tensor();
    int64_t kept = 0;
    for (int64_t i = 0; i < xf.numel(); ++i) {
      const double yi = yf.data<double>()[i], gi = g.data<double>()[i], xi = xf.data<double>()[i];
      const bool keep = yi != 0;
      kept += keep;
      if (keep && std::abs(yi - xi / (1 - p)) > 1e-12) f.add("dropout: a kept value is not x / (1 - p)");
      if (std::abs(gi - (keep ? 1 / (1 - p) : 0.0)) > 1e-12)
        f.add("dropout: gradient " + std::to_string(gi) + " at element " + std::to_string(i) +
              " does not follow the forward's mask");
      f.add_cases(1);
    }
    // 1200 draws with keep probability 0.6: 720 expected, sd ~17.
    if (kept < 620 || kept > 820) f.add("dropout: " + std::to_string(kept) + " of 1200 kept with p = 0.4");
  });
  f.report(1000);
}

TEST(NnGrad, Reductions) {
  Failures f;
  check_op(
      "sum all", {{{5, 3}}}, [](const V& x) { return nn::sum(x[0]); }, f);
  check_op(
      "sum dim", {{{5, 3}}}, [](const V& x) { return nn::sum(x[0], {0}); }, f);
  check_op(
      "sum keepdim", {{{2, 3, 4}}},
      [](const V& x) {
        return nn::sum(x[0], {0, 2}, true);
      },
      f);
  check_op(
      "mean", {{{5, 3}}}, [](const V& x) { return nn::mean(x[0], {1}); }, f);
  check_op(
      "amax", {{{5, 3}}}, [](const V& x) { return nn::amax(x[0], {1}); }, f);
  check_op(
      "amin all", {{{5, 3}}}, [](const V& x) { return nn::amin(x[0]); }, f);
  f.report(60);
}

// sum/mean backward broadcasts the gradient into the input's layout without communication, a reduced sharded dim
// included (each rank builds only its block).
TEST(NnGrad, ReductionBackwardKeepsTheInputLayout) {
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    const std::vector<std::vector<Placement>> layouts{
        {Shard{0}, Shard{1}}, {Shard{1}, Replicate{}}, {Replicate{}, Shard{0}}};
    for (const auto& layout : layouts) {
      for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {0, 1}}) {
        for (bool is_mean : {false, true}) {
          Variable x(dt::randn({5, 6}, mesh, layout, {.dtype = DType::f64, .seed = 3, .shard_order = {}}), true);
          Variable y = nn::mul(x, 2.0);
          DTensor seen;
          y.register_hook([&](const DTensor& g) {
            seen = g;
            return DTensor();
          });
          Variable r = is_mean ? nn::mean(y, dims) : nn::sum(y, dims);
          DTensor g = nn::ones_like(r.data());
          CommCounter counter(mesh);
          nn::backward({r}, {g});
          const std::string label = std::string(is_mean ? "mean" : "sum") + " over " + std::to_string(dims.size()) +
                                    " dims of " + y.spec().to_string();
          ASSERT_TRUE(seen.defined()) << label;
          EXPECT_TRUE(seen.spec() == y.spec()) << label << ": gradient " << seen.spec().to_string();
          EXPECT_EQ(counter.total(), 0) << label;
          const double scale = is_mean ? 1.0 / double(dims.size() == 2 ? 30 : dims[0] == 0 ? 5 : 6) : 1.0;
          std::string why;
          EXPECT_TRUE(op_test::compare(seen.full_tensor(), Tensor::full({5, 6}, scale, DType::f64), false, &why))
              << label << ": " << why;
        }
      }
    }
  });
}

TEST(NnGrad, NetworkFunctions) {
  Failures f;
  check_op(
      "softmax", {{{5, 3}}}, [](const V& x) { return nn::softmax(x[0], -1); }, f);
  check_op(
      "log_softmax dim 0", {{{5, 3}}}, [](const V& x) { return nn::log_softmax(x[0], 0); }, f);
  check_op(
      "layer_norm", {{{5, 4}}, {{4}}, {{4}}}, [](const V& x) { return nn::layer_norm(x[0], {4}, x[1], x[2]); }, f);
  check_op(
      "layer_norm no affine", {{{2, 3, 4}}}, [](const V& x) { return nn::layer_norm(x[0], {4}); }, f);
  check_op(
      "rms_norm", {{{2, 3, 4}}, {{4}}}, [](const V& x) { return nn::rms_norm(x[0], {4}, x[1]); }, f);
  f.report(60);
}

TEST(NnGrad, EmbeddingAndLoss) {
  Failures f;
  auto ids_of = [](const Variable& like, int64_t n) {
    return dt::to(dt::mul(dt::add(like.data(), 2.0), double(n) / 4.0 - 1e-9), DType::i64);
  };
  // ids are drawn in [0, n) from an input that is not differentiable.
  check_op(
      "embedding", {{{7, 3}}, {{2, 5}, -2, 2, false}}, [&](const V& x) { return nn::embedding(ids_of(x[1], 7), x[0]); },
      f);
  for (auto red : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone})
    check_op(
        "cross_entropy " + std::to_string(int(red)), {{{6, 5}}, {{6}, -2, 2, false}},
        [&](const V& x) { return nn::cross_entropy(x[0], ids_of(x[1], 5), -100, red); }, f);
  check_op(
      "cross_entropy ignore", {{{2, 3, 5}}, {{2, 3}, -2, 2, false}},
      [&](const V& x) { return nn::cross_entropy(x[0], ids_of(x[1], 5), /*ignore_index=*/2); }, f);
  f.report(100);
}

TEST(NnGrad, AttentionAndRope) {
  Failures f;
  check_op(
      "sdpa causal", {{{2, 2, 4, 2}}, {{2, 2, 4, 2}}, {{2, 2, 4, 2}}},
      [](const V& x) { return nn::scaled_dot_product_attention(x[0], x[1], x[2]); }, f);
  // The fused attention: causal and not, grouped-query (2 and 1 kv heads), a decode step (one query over a cache),
  // left padding, length 1; every placement of q, k and v the harness tries (heads, batch, sequence or head dim
  // sharded, uneven and empty shards).
  auto fused = [](bool causal, std::optional<double> scale = std::nullopt, std::vector<int64_t> key_start = {}) {
    const nn::FusedAttentionOptions o{.causal = causal, .scale = scale, .key_start = key_start};
    return [o](const V& x) { return nn::fused_attention(x[0], x[1], x[2], o); };
  };
  check_op("fused causal", {{{2, 2, 5, 2}}, {{2, 2, 5, 2}}, {{2, 2, 5, 2}}}, fused(true), f);
  check_op("fused full", {{{2, 2, 3, 2}}, {{2, 2, 5, 2}}, {{2, 2, 5, 2}}}, fused(false), f);
  check_op("fused gqa", {{{1, 4, 4, 2}}, {{1, 2, 4, 2}}, {{1, 2, 4, 2}}}, fused(true), f);
  check_op("fused mqa decode", {{{2, 3, 1, 2}}, {{2, 1, 6, 2}}, {{2, 1, 6, 2}}}, fused(true), f);
  check_op("fused left padding", {{{3, 2, 4, 2}}, {{3, 2, 4, 2}}, {{3, 2, 4, 2}}}, fused(true, 0.7, {0, 2, 3}), f);
  check_op("fused length 1", {{{2, 2, 1, 2}}, {{2, 2, 1, 2}}, {{2, 2, 1, 2}}}, fused(true), f);
  check_op(
      "rope", {{{2, 3, 4}}},
      [](const V& x) {
        nn::RopeTables t = nn::rope_tables(3, 4, 10000.0, x[0].mesh(), DType::f64);
        return nn::apply_rope(x[0], t.cos, t.sin);
      },
      f);
  f.report(60);
}

// The fused attention against the composed one (the T x T scores, softmax, the k and v heads repeated for each
// query head): values and gradients on one rank, f64.
TEST(NnGrad, FusedAttentionEqualsTheComposedOne) {
  const DeviceMesh mesh = DeviceMesh::create(make_thread_world(1)[0], Device::cpu(), {1});
  for (auto [hq, hkv, t, causal] : {std::tuple{4, 4, 9, true}, {4, 2, 9, true}, {4, 1, 7, false}, {2, 2, 0, true}}) {
    auto make = [&](int64_t h, uint64_t seed) {
      return Variable(nn_test::replicate_on(Tensor::randn({2, h, t, 8}, seed, DType::f64), mesh), true);
    };
    Variable q = make(hq, 1), k = make(hkv, 2), v = make(hkv, 3);
    const DTensor w = nn_test::replicate_on(Tensor::randn({2, hq, t, 8}, 4, DType::f64), mesh);
    auto repeat = [&](const Variable& y) {
      return nn::reshape(nn::expand(nn::unsqueeze(y, 2), {2, hkv, hq / hkv, t, 8}), {2, hq, t, 8});
    };
    std::vector<Tensor> grads[2];
    for (int composed = 0; composed < 2; ++composed) {
      Variable o = composed ? nn::scaled_dot_product_attention(q, repeat(k), repeat(v), causal)
                            : nn::fused_attention(q, k, v, {.causal = causal, .scale = std::nullopt, .key_start = {}});
      nn::sum(nn::mul(o, Variable(w))).backward();
      for (Variable* x : {&q, &k, &v}) {
        grads[composed].push_back(x->grad().full_tensor().clone());
        x->zero_grad();
      }
      grads[composed].push_back(o.full_tensor());
    }
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_TRUE(allclose(grads[0][i], grads[1][i], 1e-12, 1e-12))
          << "hq " << hq << " hkv " << hkv << " t " << t << " causal " << causal << " item " << i;
  }
}

TEST(NnGrad, Redistribute) {
  Failures f;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    (void)mesh_shape;
  }
  // The gradient of a redistribution goes back to the input's placements, whatever the target.
  nn_test::check_distributed(
      "redistribute to Shard(1)", {{{5, 3}}},
      [](const V& x) {
        std::vector<Placement> p(size_t(x[0].mesh().ndim()), Shard{1});
        return nn::redistribute(x[0], p);
      },
      f);
  nn_test::check_distributed(
      "redistribute to Replicate", {{{5, 3}}},
      [](const V& x) {
        std::vector<Placement> p(size_t(x[0].mesh().ndim()), Replicate{});
        return nn::mul(nn::redistribute(x[0], p), 2.0);
      },
      f);
  f.report(10);
}

}  // namespace
}  // namespace dt
