// Backward kernels against central finite differences in f64: for L(inputs) = sum(f(inputs) * G) with a fixed
// random G, dL/dx_j = (L(x + h e_j) - L(x - h e_j)) / 2h for every element j of every input. Then the f32 / bf16
// paths of the same backward kernels against their f64 results.
#include <cmath>
#include <functional>

#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/softmax.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

double dot(const Tensor& y, const Tensor& g) {
  std::vector<double> a = y.to_vector(), b = g.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> numeric_grad(const Fn& f, std::vector<Tensor> inputs, size_t which, const Tensor& g,
                                 double h = 1e-6) {
  Tensor x = inputs[which].clone();
  inputs[which] = x;
  double* p = x.data<double>();
  std::vector<double> out;
  for (int64_t j = 0; j < x.numel(); ++j) {
    double orig = p[j];
    p[j] = orig + h;
    double lp = dot(f(inputs), g);
    p[j] = orig - h;
    double lm = dot(f(inputs), g);
    p[j] = orig;
    out.push_back((lp - lm) / (2 * h));
  }
  return out;
}

// Checks analytic[i] (the gradient wrt inputs[i]) against finite differences for every input i listed.
void check_grads(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& analytic, const Tensor& g, double tol = 1e-6) {
  ASSERT_EQ(inputs.size(), analytic.size()) << what;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!analytic[i].defined()) continue;
    ASSERT_EQ(analytic[i].shape(), inputs[i].shape()) << what << " input " << i;
    EXPECT_TRUE(all_close(analytic[i], numeric_grad(f, inputs, i, g), tol, tol)) << what << ": grad of input " << i;
  }
}

Tensor r64(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) { return randu(s, seed, DType::f64, lo, hi); }

TEST(OpsBackward, BinaryOpsWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{4}, {}}, {{1, 3, 1}, {2, 1, 2}}};
  uint64_t seed = 1;
  for (auto [as, bs] : shapes) {
    Tensor a = r64(as, seed++, 0.5, 2), b = r64(bs, seed++, 0.5, 2);
    Tensor g = r64(bcast(as, bs), seed++);
    std::string sh = shape_str(as) + " vs " + shape_str(bs);
    auto ab = [](auto op) { return Fn([op](const std::vector<Tensor>& v) { return op(v[0], v[1], Stream{}); }); };
    BinaryGrads r = add_backward(g, as, bs);
    check_grads("add " + sh, ab(kernels::add), {a, b}, {r.grad_a, r.grad_b}, g);
    r = sub_backward(g, as, bs);
    check_grads("sub " + sh, ab(kernels::sub), {a, b}, {r.grad_a, r.grad_b}, g);
    r = mul_backward(g, a, b);
    check_grads("mul " + sh, ab(kernels::mul), {a, b}, {r.grad_a, r.grad_b}, g);
    r = div_backward(g, a, b);
    check_grads("div " + sh, ab(kernels::div), {a, b}, {r.grad_a, r.grad_b}, g);
    r = pow_backward(g, a, b);
    check_grads("pow " + sh, ab(kernels::pow), {a, b}, {r.grad_a, r.grad_b}, g);
  }
  // pow at a == 0: torch's convention (zero gradient for b where a == 0 and b >= 0; for a where b == 0).
  Tensor a = Tensor::from_vector({0, 0, 2}, {3}, DType::f64), b = Tensor::from_vector({0, 2, 0}, {3}, DType::f64);
  BinaryGrads r = pow_backward(Tensor::ones({3}, DType::f64), a, b);
  EXPECT_TRUE(all_close(r.grad_a, {0, 0, 0}, 0));
  EXPECT_TRUE(all_close(r.grad_b, {0, 0, std::log(2.0)}, 1e-15));
}

TEST(OpsBackward, UnaryOps) {
  struct Case {
    std::string name;
    double lo, hi;
    std::function<Tensor(const Tensor&)> fwd;
    std::function<Tensor(const Tensor& g, const Tensor& x, const Tensor& y)> bwd;
  };
  const std::vector<Case> cases = {
      {"neg", -2, 2, [](const Tensor& x) { return neg(x); }, [](auto& g, auto&, auto&) { return neg_backward(g); }},
      {"abs", 0.1, 2, [](const Tensor& x) { return abs(neg(x)); },  // abs at negative inputs, chained with neg
       [](auto& g, auto& x, auto&) { return neg_backward(abs_backward(g, neg(x))); }},
      {"relu", 0.1, 2, [](const Tensor& x) { return relu(sub_scalar(x, 1)); },
       [](auto& g, auto&, auto& y) { return relu_backward(g, y); }},
      {"exp", -2, 2, [](const Tensor& x) { return exp(x); },
       [](auto& g, auto&, auto& y) { return exp_backward(g, y); }},
      {"log", 0.2, 3, [](const Tensor& x) { return log(x); },
       [](auto& g, auto& x, auto&) { return log_backward(g, x); }},
      {"sqrt", 0.2, 3, [](const Tensor& x) { return sqrt(x); },
       [](auto& g, auto&, auto& y) { return sqrt_backward(g, y); }},
      {"rsqrt", 0.2, 3, [](const Tensor& x) { return rsqrt(x); },
       [](auto& g, auto&, auto& y) { return rsqrt_backward(g, y); }},
      {"tanh", -2, 2, [](const Tensor& x) { return tanh(x); },
       [](auto& g, auto&, auto& y) { return tanh_backward(g, y); }},
      {"sigmoid", -3, 3, [](const Tensor& x) { return sigmoid(x); },
       [](auto& g, auto&, auto& y) { return sigmoid_backward(g, y); }},
      {"silu", -3, 3, [](const Tensor& x) { return silu(x); },
       [](auto& g, auto& x, auto&) { return silu_backward(g, x); }},
      {"gelu", -3, 3, [](const Tensor& x) { return gelu(x); },
       [](auto& g, auto& x, auto&) { return gelu_backward(g, x); }},
      {"gelu_tanh", -3, 3, [](const Tensor& x) { return gelu(x, GeluApprox::kTanh); },
       [](auto& g, auto& x, auto&) { return gelu_backward(g, x, GeluApprox::kTanh); }},
      {"pow_scalar", 0.2, 2, [](const Tensor& x) { return pow_scalar(x, 2.5); },
       [](auto& g, auto& x, auto&) { return pow_scalar_backward(g, x, 2.5); }},
      {"pow_scalar0", 0.2, 2, [](const Tensor& x) { return pow_scalar(x, 0); },
       [](auto& g, auto& x, auto&) { return pow_scalar_backward(g, x, 0); }},
      {"mul_scalar", -2, 2, [](const Tensor& x) { return mul_scalar(x, -1.5); },
       [](auto& g, auto&, auto&) { return mul_scalar(g, -1.5); }},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (const Shape& sh : {Shape{7}, Shape{2, 3}}) {
      Tensor x = r64(sh, seed++, c.lo, c.hi), g = r64(sh, seed++);
      Tensor y = c.fwd(x);
      Fn f = [&](const std::vector<Tensor>& v) { return c.fwd(v[0]); };
      check_grads(c.name + " " + shape_str(sh), f, {x}, {c.bwd(g, x, y)}, g);
      // Lower precision: the same backward on rounded inputs against its f64 result.
      for (DType dt : {DType::f32, DType::bf16}) {
        Tensor xl = x.to(dt), gl = g.to(dt);
        Tensor want = c.bwd(gl.to(DType::f64), xl.to(DType::f64), c.fwd(xl.to(DType::f64)));
        Tensor got = c.bwd(gl, xl, c.fwd(xl));
        EXPECT_EQ(got.dtype(), dt);
        // bf16: the saved output is itself rounded, which the f64 reference does not see.
        EXPECT_TRUE(all_close(got, want.to_vector(), dt == DType::f32 ? 1e-5 : 5e-2, dt == DType::f32 ? 1e-6 : 5e-2))
            << c.name << " " << dtype_name(dt);
      }
    }
  }
}

TEST(OpsBackward, WhereMaskedFillAndSumToShape) {
  Tensor cond = randint({2, 3}, 1, 0, 1, DType::b8);
  Tensor a = r64({3}, 2), b = r64({2, 1}, 3), g = r64({2, 3}, 4);
  BinaryGrads r = where_backward(g, cond, a.shape(), b.shape());
  Fn f = [&](const std::vector<Tensor>& v) { return where(cond, v[0], v[1]); };
  check_grads("where", f, {a, b}, {r.grad_a, r.grad_b}, g);
  Tensor x = r64({2, 3}, 5);
  Fn mf = [&](const std::vector<Tensor>& v) { return masked_fill(v[0], cond, 7); };
  check_grads("masked_fill", mf, {x}, {masked_fill_backward(g, cond)}, g);
  // sum_to_shape against explicit sums.
  Tensor big = r64({4, 2, 3}, 6);
  std::vector<double> bv = big.to_vector(), want(3, 0.0);
  for (size_t i = 0; i < bv.size(); ++i) want[i % 3] += bv[i];
  EXPECT_TRUE(all_close(sum_to_shape(big, {1, 3}), want, 1e-14));
  EXPECT_EQ(sum_to_shape(big, {1, 3}).shape(), (Shape{1, 3}));
  EXPECT_TRUE(sum_to_shape(big, big.shape()).shares_storage_with(big));
  EXPECT_TRUE(throws_with([&] { sum_to_shape(big, {5}); }, "does not broadcast"));
}

TEST(OpsBackward, MatmulAndLinear) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{3, 4}, {4, 2}},
                                                       {{4}, {4}},
                                                       {{4}, {4, 3}},
                                                       {{2, 4}, {4}},
                                                       {{2, 3, 4}, {4, 2}},
                                                       {{2, 3, 4}, {2, 4, 2}},
                                                       {{2, 1, 2, 3}, {3, 3, 2}},
                                                       {{3, 4}, {2, 4, 2}},
                                                       {{2, 0, 3}, {3, 2}}};
  uint64_t seed = 200;
  for (auto [as, bs] : shapes) {
    Tensor a = r64(as, seed++), b = r64(bs, seed++);
    Tensor y = matmul(a, b);
    Tensor g = r64(y.shape(), seed++);
    MatmulGrads r = matmul_backward(g, a, b);
    Fn f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
    check_grads("matmul " + shape_str(as) + " @ " + shape_str(bs), f, {a, b}, {r.grad_a, r.grad_b}, g);
    // Transposed (non-contiguous) saved inputs give the same gradients.
    if (as.size() == 2 && bs.size() == 2) {
      MatmulGrads t = matmul_backward(g, noncontig(a), noncontig(b));
      EXPECT_TRUE(all_close(t.grad_a, r.grad_a.to_vector(), 1e-14));
      EXPECT_TRUE(all_close(t.grad_b, r.grad_b.to_vector(), 1e-14));
    }
    MatmulGrads only_b = matmul_backward(g, a, b, false, true);
    EXPECT_FALSE(only_b.grad_a.defined());
    EXPECT_TRUE(all_close(only_b.grad_b, r.grad_b.to_vector(), 0));
  }
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    Tensor x = r64(xs, seed++), w = r64({5, 4}, seed++), bias = r64({5}, seed++);
    Tensor g = r64(linear(x, w, bias).shape(), seed++);
    LinearGrads r = linear_backward(g, x, w, true);
    Fn f = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
    check_grads("linear " + shape_str(xs), f, {x, w, bias}, {r.grad_x, r.grad_weight, r.grad_bias}, g);
    // bf16 against f64 on the same rounded values.
    Tensor xb = x.to(DType::bf16), wb = w.to(DType::bf16), gb = g.to(DType::bf16);
    LinearGrads lb = linear_backward(gb, xb, wb, true);
    LinearGrads l64 = linear_backward(gb.to(DType::f64), xb.to(DType::f64), wb.to(DType::f64), true);
    EXPECT_TRUE(all_close(lb.grad_x, l64.grad_x.to_vector(), 2e-2, 2e-2));
    EXPECT_TRUE(all_close(lb.grad_weight, l64.grad_weight.to_vector(), 2e-2, 2e-2));
    EXPECT_TRUE(all_close(lb.grad_bias, l64.grad_bias.to_vector(), 2e-2, 2e-2));
  }
}

TEST(OpsBackward, SoftmaxAndLogSoftmax) {
  uint64_t seed = 300;
  for (const Shape& sh : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}}) {
    for (int64_t dim = -int64_t(sh.size()); dim < int64_t(sh.size()); ++dim) {
      Tensor x = r64(sh, seed++, -2, 2), g = r64(sh, seed++);
      Fn fs = [dim](const std::vector<Tensor>& v) { return softmax(v[0], dim); };
      Fn fl = [dim](const std::vector<Tensor>& v) { return log_softmax(v[0], dim); };
      std::string what = shape_str(sh) + " dim " + std::to_string(dim);
      check_grads("softmax " + what, fs, {x}, {softmax_backward(g, softmax(x, dim), dim)}, g);
      check_grads("log_softmax " + what, fl, {x}, {log_softmax_backward(g, log_softmax(x, dim), dim)}, g);
      Tensor xf = x.to(DType::f32), gf = g.to(DType::f32);
      Tensor want = softmax_backward(gf.to(DType::f64), softmax(xf.to(DType::f64), dim), dim);
      EXPECT_TRUE(all_close(softmax_backward(gf, softmax(xf, dim), dim), want.to_vector(), 1e-5, 1e-6));
    }
  }
}

TEST(OpsBackward, LayerNormAndRmsNorm) {
  uint64_t seed = 400;
  for (const Shape& sh : {Shape{3, 5}, Shape{2, 3, 4}}) {
    for (int64_t k = 1; k <= 2; ++k) {
      Shape ns(sh.end() - k, sh.end());
      for (bool affine : {false, true}) {
        Tensor x = r64(sh, seed++, -2, 2), g = r64(sh, seed++);
        Tensor w = affine ? r64(ns, seed++, 0.5, 1.5) : Tensor(), b = affine ? r64(ns, seed++) : Tensor();
        std::string what = shape_str(sh) + " k=" + std::to_string(k) + (affine ? " affine" : "");
        LayerNormResult ln = layer_norm(x, ns, w, b);
        LayerNormGrads lg = layer_norm_backward(g, x, ns, ln.mean, ln.rstd, w, b);
        EXPECT_EQ(lg.grad_weight.defined(), affine);
        Fn fl = [&](const std::vector<Tensor>& v) {
          return layer_norm(v[0], ns, affine ? v[1] : Tensor(), affine ? v[2] : Tensor()).out;
        };
        std::vector<Tensor> in = {x, affine ? w : Tensor::zeros({1}, DType::f64),
                                  affine ? b : Tensor::zeros({1}, DType::f64)};
        check_grads("layer_norm " + what, fl, in, {lg.grad_x, lg.grad_weight, lg.grad_bias}, g);
        RmsNormResult rn = rms_norm(x, ns, w);
        RmsNormGrads rg = rms_norm_backward(g, x, ns, rn.rstd, w);
        Fn fr = [&](const std::vector<Tensor>& v) { return rms_norm(v[0], ns, affine ? v[1] : Tensor()).out; };
        check_grads("rms_norm " + what, fr, {x, in[1]}, {rg.grad_x, rg.grad_weight}, g);
        // bf16 paths against f64 on the same rounded values.
        Tensor xb = x.to(DType::bf16), gb = g.to(DType::bf16), wb = affine ? w.to(DType::bf16) : Tensor();
        RmsNormResult rb = rms_norm(xb, ns, wb);
        RmsNormGrads gb16 = rms_norm_backward(gb, xb, ns, rb.rstd, wb);
        Tensor w64 = affine ? wb.to(DType::f64) : Tensor();
        RmsNormResult r64_ = rms_norm(xb.to(DType::f64), ns, w64);
        RmsNormGrads g64 = rms_norm_backward(gb.to(DType::f64), xb.to(DType::f64), ns, r64_.rstd, w64);
        EXPECT_TRUE(all_close(gb16.grad_x, g64.grad_x.to_vector(), 3e-2, 3e-2)) << what;
        if (affine) {
          EXPECT_TRUE(all_close(gb16.grad_weight, g64.grad_weight.to_vector(), 3e-2, 3e-2)) << what;
        }
      }
    }
  }
}

TEST(OpsBackward, EmbeddingAndCrossEntropy) {
  Tensor w = r64({6, 3}, 500);
  Tensor ids = Tensor::from_data<int64_t>({1, 4, 1, 0, 5, 1}, {2, 3});
  Tensor g = r64({2, 3, 3}, 501);
  Fn fe = [&](const std::vector<Tensor>& v) { return embedding(v[0], ids); };
  check_grads("embedding", fe, {w}, {embedding_backward(g, ids, 6)}, g);
  // padding_idx: its row gets no gradient.
  Tensor gp = embedding_backward(g, ids, 6, 1);
  std::vector<double> gv = gp.to_vector();
  for (int j = 0; j < 3; ++j) EXPECT_EQ(gv[size_t(3 + j)], 0.0);

  for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean}) {
    for (const Shape& ls : {Shape{5, 4}, Shape{2, 3, 6}}) {
      Tensor logits = r64(ls, 510, -3, 3);
      Shape ts(ls.begin(), ls.end() - 1);
      Tensor targets = randint(ts, 511, -1, ls.back() - 1, DType::i64);  // -1 is ignored
      Tensor gl = red == LossReduction::kNone ? r64(ts, 512) : Tensor::full({}, 0.7, DType::f64);
      CrossEntropyResult ce = cross_entropy(logits, targets, -1, red);
      Tensor grad = cross_entropy_backward(gl, logits, targets, ce.lse, -1, red);
      Fn f = [&](const std::vector<Tensor>& v) { return cross_entropy(v[0], targets, -1, red).loss; };
      std::string what = str_cat("cross_entropy reduction ", int(red), " ", shape_str(ls));
      check_grads(what, f, {logits}, {grad}, gl);
      // Without the saved lse (recomputed) the gradient is the same.
      EXPECT_TRUE(all_close(cross_entropy_backward(gl, logits, targets, Tensor(), -1, red), grad.to_vector(), 1e-14))
          << what;
      // f32 / bf16 logits against f64.
      for (DType dt : {DType::f32, DType::bf16}) {
        Tensor ll = logits.to(dt), gll = gl.to(dt);
        CrossEntropyResult cl = cross_entropy(ll, targets, -1, red);
        Tensor got = cross_entropy_backward(gll, ll, targets, cl.lse, -1, red);
        Tensor want = cross_entropy_backward(gll.to(DType::f64), ll.to(DType::f64), targets, Tensor(), -1, red);
        double tol = dt == DType::f32 ? 1e-5 : 2e-2;
        EXPECT_TRUE(all_close(got, want.to_vector(), tol, tol)) << what << " " << dtype_name(dt);
      }
    }
  }
}

}  // namespace
}  // namespace dt::kernels
