// The fused attention kernel against a reference written here (the whole score matrix, in double): forward and
// backward, causal and not, grouped-query, bottom-right causal alignment, left padding, head offsets (a tensor-
// parallel rank's block), strided inputs, empty and length-1 sequences, f32 / f64 / bf16; and the backward against
// central finite differences.
#include "kernels/ops/attention.h"

#include <cmath>
#include <limits>

#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

// The reference on whole tensors (double): q [B, Hq, Tq, D], k/v [B, Hkv, Tk, D], dout like q (or empty: no
// backward).
Ref reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const AttentionOptions& o) {
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  const int64_t group = o.group > 0 ? o.group : Hq / Hkv;
  const double scale = o.scale != 0 ? o.scale : 1 / std::sqrt(double(D));
  const std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector();
  const std::vector<double> dO = dout.defined() ? dout.to_vector() : std::vector<double>(Q.size(), 0.0);
  Ref r;
  r.out.assign(Q.size(), 0);
  r.lse.assign(size_t(B * Hq * Tq), 0);
  r.dq.assign(Q.size(), 0);
  r.dk.assign(K.size(), 0);
  r.dv.assign(V.size(), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = (o.q_head_offset + h) / group - o.kv_head_offset;
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t first = o.key_start.empty() ? 0 : o.key_start[size_t(b)];
        const int64_t last = o.causal ? i + Tk - Tq : Tk - 1;
        auto qi = [&](int64_t x) { return Q[size_t(((b * Hq + h) * Tq + i) * D + x)]; };
        auto kj = [&](int64_t j, int64_t x) { return K[size_t(((b * Hkv + g) * Tk + j) * D + x)]; };
        auto vj = [&](int64_t j, int64_t x) { return V[size_t(((b * Hkv + g) * Tk + j) * D + x)]; };
        std::vector<double> s(size_t(Tk), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = first; j <= last && j < Tk; ++j) {
          double a = 0;
          for (int64_t x = 0; x < D; ++x) a += qi(x) * kj(j, x);
          s[size_t(j)] = a * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        const size_t row = size_t((b * Hq + h) * Tq + i);
        if (mx == -INFINITY) {
          r.lse[row] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (double& x : s) sum += x = (x == -INFINITY ? 0 : std::exp(x - mx));
        for (double& x : s) x /= sum;
        r.lse[row] = mx + std::log(sum);
        for (int64_t x = 0; x < D; ++x) {
          double a = 0;
          for (int64_t j = 0; j < Tk; ++j) a += s[size_t(j)] * vj(j, x);
          r.out[row * size_t(D) + size_t(x)] = a;
        }
        // Backward: dP = dO V^T, dS = P (dP - sum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
        std::vector<double> dp(size_t(Tk), 0);
        double dsum = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          for (int64_t x = 0; x < D; ++x) dp[size_t(j)] += dO[row * size_t(D) + size_t(x)] * vj(j, x);
          dsum += s[size_t(j)] * dp[size_t(j)];
        }
        for (int64_t j = 0; j < Tk; ++j) {
          const double ds = s[size_t(j)] * (dp[size_t(j)] - dsum) * scale;
          for (int64_t x = 0; x < D; ++x) {
            r.dq[row * size_t(D) + size_t(x)] += ds * kj(j, x);
            r.dk[size_t(((b * Hkv + g) * Tk + j) * D + x)] += ds * qi(x);
            r.dv[size_t(((b * Hkv + g) * Tk + j) * D + x)] += s[size_t(j)] * dO[row * size_t(D) + size_t(x)];
          }
        }
      }
    }
  return r;
}

void expect_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                  double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
      continue;
    }
    const double err = std::abs(got[i] - want[i]) / (1 + std::abs(want[i]));
    if (err > worst) worst = err, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": worst at " << at << " got " << got[at] << " want " << want[at];
}

struct Case {
  std::string name;
  int64_t B, Hq, Hkv, Tq, Tk, D;
  bool causal;
  std::vector<int64_t> key_start;
};

std::vector<Case> cases() {
  return {
      {"mha causal", 2, 3, 3, 37, 37, 8, true, {}},
      {"mha full", 2, 2, 2, 19, 23, 6, false, {}},
      {"gqa 2", 1, 4, 2, 70, 70, 16, true, {}},
      {"mqa", 2, 4, 1, 33, 33, 4, true, {}},
      {"tiles", 1, 1, 1, 300, 300, 8, true, {}},  // several query and key tiles, a short last one
      {"decode", 2, 4, 2, 1, 29, 8, true, {}},    // one query row sees the whole cache
      {"chunk", 1, 2, 1, 5, 40, 8, true, {}},     // bottom-right alignment
      {"left padding", 3, 2, 2, 12, 12, 8, true, {0, 4, 11}},
      {"padding decode", 2, 2, 1, 1, 9, 8, true, {3, 0}},
      {"empty q", 1, 2, 2, 0, 5, 8, false, {}},
      {"empty kv", 1, 2, 2, 3, 0, 8, false, {}},
      {"length 1", 2, 2, 2, 1, 1, 8, true, {}},
  };
}

std::string label(const Case& c, DType t) { return c.name + " " + dtype_name(t); }

TEST(Attention, ForwardAndBackwardMatchTheReference) {
  for (const Case& c : cases())
    for (DType t : {DType::f32, DType::f64, DType::bf16}) {
      const Tensor q = randu({c.B, c.Hq, c.Tq, c.D}, 1, t), k = randu({c.B, c.Hkv, c.Tk, c.D}, 2, t),
                   v = randu({c.B, c.Hkv, c.Tk, c.D}, 3, t), dout = randu({c.B, c.Hq, c.Tq, c.D}, 4, t);
      AttentionOptions o;
      o.causal = c.causal;
      o.key_start = c.key_start;
      const Ref ref = reference(q, k, v, dout, o);
      const AttentionResult r = attention(q, k, v, o);
      const double tol = t == DType::bf16 ? 2e-2 : (t == DType::f32 ? 2e-5 : 1e-12);
      expect_close(label(c, t) + " out", r.out.to_vector(), ref.out, tol);
      expect_close(label(c, t) + " lse", r.lse.to_vector(), ref.lse, tol);
      const AttentionGrads g = attention_backward(dout, q, k, v, r.out, r.lse, o);
      const double gtol = t == DType::bf16 ? 5e-2 : (t == DType::f32 ? 5e-5 : 1e-11);
      expect_close(label(c, t) + " dq", g.dq.to_vector(), ref.dq, gtol);
      expect_close(label(c, t) + " dk", g.dk.to_vector(), ref.dk, gtol);
      expect_close(label(c, t) + " dv", g.dv.to_vector(), ref.dv, gtol);
    }
}

// A tensor-parallel rank's block: some query heads (offset) with all key/value heads, or with its own share of them.
TEST(Attention, HeadOffsetsReadTheGlobalKeyValueHeads) {
  const int64_t B = 2, Hq = 8, Hkv = 2, T = 21, D = 8;
  const Tensor q = randu({B, Hq, T, D}, 5, DType::f64), k = randu({B, Hkv, T, D}, 6, DType::f64),
               v = randu({B, Hkv, T, D}, 7, DType::f64), dout = randu({B, Hq, T, D}, 8, DType::f64);
  const Ref whole = reference(q, k, v, dout, {});
  auto heads = [](const std::vector<double>& x, int64_t b, int64_t h0, int64_t n, int64_t H, int64_t rows) {
    std::vector<double> out;
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t h = h0; h < h0 + n; ++h)
        for (int64_t i = 0; i < rows; ++i) out.push_back(x[size_t((bb * H + h) * rows + i)]);
    return out;
  };
  // Query heads 3..5 (reading kv heads 0 and 1) with every kv head (replicated k and v).
  AttentionOptions o;
  o.group = Hq / Hkv;
  o.q_head_offset = 3;
  const Tensor q35 = q.narrow(1, 3, 3), d35 = dout.narrow(1, 3, 3);
  AttentionResult r = attention(q35, k, v, o);
  expect_close("heads 3..5 out", r.out.to_vector(), heads(whole.out, B, 3, 3, Hq, T * D), 1e-12);
  AttentionGrads g = attention_backward(d35, q35, k, v, r.out, r.lse, o);
  expect_close("heads 3..5 dq", g.dq.to_vector(), heads(whole.dq, B, 3, 3, Hq, T * D), 1e-11);
  // dk, dv: the part of the sums that heads 3..5 contribute.
  const Ref part = reference(q35, k, v, d35, o);
  expect_close("heads 3..5 dk", g.dk.to_vector(), part.dk, 1e-11);
  // Query heads 4..7 with their own kv head 1 (kv sharded like q).
  o.q_head_offset = 4;
  o.kv_head_offset = 1;
  const Tensor q47 = q.narrow(1, 4, 4), k1 = k.narrow(1, 1, 1), v1 = v.narrow(1, 1, 1);
  r = attention(q47, k1, v1, o);
  expect_close("heads 4..7 out", r.out.to_vector(), heads(whole.out, B, 4, 4, Hq, T * D), 1e-12);
  g = attention_backward(dout.narrow(1, 4, 4), q47, k1, v1, r.out, r.lse, o);
  expect_close("heads 4..7 dk", g.dk.to_vector(), heads(whole.dk, B, 1, 1, Hkv, T * D), 1e-11);
  expect_close("heads 4..7 dv", g.dv.to_vector(), heads(whole.dv, B, 1, 1, Hkv, T * D), 1e-11);
  // A block whose query heads read a kv head it does not hold.
  o.kv_head_offset = 0;
  EXPECT_THROW(attention(q47, k1, v1, o), InvalidArgument);
}

TEST(Attention, StridedInputsAreReadInPlace) {
  // q from a [B, T, H, D] projection transposed, k/v a narrowed cache [B, H, capacity, D].
  const Tensor qt = randu({2, 17, 4, 8}, 9), cache_k = randu({2, 2, 40, 8}, 10), cache_v = randu({2, 2, 40, 8}, 11);
  const Tensor q = qt.transpose(1, 2), k = cache_k.narrow(2, 0, 17), v = cache_v.narrow(2, 0, 17);
  const AttentionResult r = attention(q, k, v);
  const AttentionResult c = attention(q.contiguous(), k.contiguous(), v.contiguous());
  expect_close("strided out", r.out.to_vector(), c.out.to_vector(), 0);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (bool causal : {true, false}) {
    const Tensor q = randu({1, 4, 6, 4}, 12, DType::f64), k = randu({1, 2, 6, 4}, 13, DType::f64),
                 v = randu({1, 2, 6, 4}, 14, DType::f64), g = randu({1, 4, 6, 4}, 15, DType::f64);
    AttentionOptions o;
    o.causal = causal;
    const AttentionResult r = attention(q, k, v, o);
    const AttentionGrads d = attention_backward(g, q, k, v, r.out, r.lse, o);
    auto loss = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
      const std::vector<double> y = attention(qq, kk, vv, o).out.to_vector(), gg = g.to_vector();
      double s = 0;
      for (size_t i = 0; i < y.size(); ++i) s += y[i] * gg[i];
      return s;
    };
    const Tensor* inputs[] = {&q, &k, &v};
    const Tensor* grads[] = {&d.dq, &d.dk, &d.dv};
    for (int which = 0; which < 3; ++which) {
      const std::vector<double> analytic = grads[which]->to_vector();
      for (int64_t j = 0; j < inputs[which]->numel(); ++j) {
        Tensor plus = inputs[which]->clone(), minus = inputs[which]->clone();
        plus.data<double>()[j] += 1e-6;
        minus.data<double>()[j] -= 1e-6;
        Tensor a[3] = {q, k, v}, b[3] = {q, k, v};
        a[which] = plus;
        b[which] = minus;
        const double numeric = (loss(a[0], a[1], a[2]) - loss(b[0], b[1], b[2])) / 2e-6;
        EXPECT_NEAR(analytic[size_t(j)], numeric, 1e-7)
            << "input " << which << " element " << j << " causal " << causal;
      }
    }
  }
}

TEST(Attention, BadInputIsNamed) {
  const Tensor q = randu({1, 3, 4, 8}, 1), k = randu({1, 2, 4, 8}, 2);
  EXPECT_THROW(attention(q, k, k), InvalidArgument);  // 3 query heads over 2 kv heads
  EXPECT_THROW(attention(randu({1, 2, 4, 8}, 1), randu({1, 2, 4, 6}, 2), randu({1, 2, 4, 6}, 3)), InvalidArgument);
  EXPECT_THROW(attention(randu({2, 4, 8}, 1), k, k), InvalidArgument);
  AttentionOptions o;
  o.key_start = {1, 2};
  EXPECT_THROW(attention(randu({1, 2, 4, 8}, 1), k, k, o), InvalidArgument);
  EXPECT_THROW(attention(randu({1, 2, 4, 8}, 1), k.to(DType::f64), k, {}), InvalidArgument);
}

}  // namespace
}  // namespace dt::kernels
