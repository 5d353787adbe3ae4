// CUDA op kernels against the CPU kernels (themselves checked against double references in the other tests) on the
// same random inputs: every family, strided GPU views, and an explicit stream. Linked with the GPU test main:
// exits 77 (skipped) without a usable GPU.
#include <cuda_runtime_api.h>

#include <cmath>

#include "kernels/ops/attention.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/rope.h"
#include "kernels/ops/shape_ops.h"
#include "kernels/ops/softmax.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

double tol(DType dt) { return dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 2e-5 : 2e-2; }

::testing::AssertionResult same(const Tensor& on_gpu, const Tensor& on_cpu, double rtol, double atol) {
  if (!on_gpu.device().is_cuda()) return ::testing::AssertionFailure() << "result is on " << on_gpu.device();
  if (on_gpu.shape() != on_cpu.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(on_gpu.shape()) << " vs "
                                         << shape_str(on_cpu.shape());
  if (on_gpu.dtype() != on_cpu.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(on_gpu.dtype()) << " vs "
                                         << dtype_name(on_cpu.dtype());
  return all_close(host(on_gpu), on_cpu.to_vector(), rtol, atol);
}

TEST(CudaOps, Elementwise) {
  uint64_t seed = 1;
  const UnaryOp float_ops[] = {UnaryOp::kNeg,       UnaryOp::kAbs,       UnaryOp::kRelu,      UnaryOp::kExp,
                               UnaryOp::kLog,       UnaryOp::kSqrt,      UnaryOp::kRsqrt,     UnaryOp::kTanh,
                               UnaryOp::kSigmoid,   UnaryOp::kSilu,      UnaryOp::kGeluErf,   UnaryOp::kGeluTanh,
                               UnaryOp::kAddScalar, UnaryOp::kMulScalar, UnaryOp::kDivScalar, UnaryOp::kPowScalar};
  for (DType dt : float_dtypes()) {
    Tensor x = randu({37, 41}, seed++, dt, 0.1, 3);
    Tensor xg = gpu(x);
    for (UnaryOp op : float_ops) {
      EXPECT_TRUE(same(unary(op, xg, 1.5), unary(op, x, 1.5), tol(dt), tol(dt))) << unary_op_name(op);
      EXPECT_TRUE(same(unary(op, xg.t(), 1.5), unary(op, x.t(), 1.5), tol(dt), tol(dt))) << unary_op_name(op) << " t";
    }
    Tensor a = randu({4, 1, 33}, seed++, dt, 0.5, 2), b = randu({5, 1}, seed++, dt, 0.5, 2);
    for (BinaryOp op :
         {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv, BinaryOp::kPow, BinaryOp::kMaximum,
          BinaryOp::kMinimum, BinaryOp::kSiluBackward, BinaryOp::kGeluTanhBackward, BinaryOp::kPowExponentGrad}) {
      EXPECT_TRUE(same(binary(op, gpu(a), gpu(b)), binary(op, a, b), tol(dt), tol(dt))) << binary_op_name(op);
    }
    EXPECT_TRUE(same(compare(CompareOp::kLt, gpu(a), gpu(b)), compare(CompareOp::kLt, a, b), 0, 0));
    EXPECT_TRUE(same(compare_scalar(CompareOp::kGe, gpu(a), 1.0), compare_scalar(CompareOp::kGe, a, 1.0), 0, 0));
    Tensor cond = compare_scalar(CompareOp::kGt, randu({5, 33}, seed++), 0);
    EXPECT_TRUE(same(where(gpu(cond), gpu(a), gpu(b)), where(cond, a, b), 0, 0));
    EXPECT_TRUE(
        same(masked_fill(gpu(a), gpu(cond.narrow(0, 0, 1)), -7), masked_fill(a, cond.narrow(0, 0, 1), -7), 0, 0));
  }
  Tensor i = randint({6, 7}, 5, -20, 20, DType::i32), j = randint({7}, 6, -20, 20, DType::i32);
  EXPECT_TRUE(same(mul(gpu(i), gpu(j)), mul(i, j), 0, 0));
  EXPECT_TRUE(same(relu(gpu(i).t()), relu(i.t()), 0, 0));
  EXPECT_TRUE(
      same(sum_to_shape(gpu(randu({3, 4, 5}, 7)), {4, 1}), sum_to_shape(randu({3, 4, 5}, 7), {4, 1}), 1e-5, 1e-6));
}

TEST(CudaOps, Reductions) {
  uint64_t seed = 100;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    Tensor x = is_floating(dt) ? randu({6, 300, 5}, seed++, dt) : randint({6, 300, 5}, seed++, -9, 9, dt);
    Tensor xg = gpu(x);
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
      double t = is_floating(dt) ? tol(dt) * 10 : 0;
      EXPECT_TRUE(same(sum(xg, dims, true), sum(x, dims, true), t, t)) << dtype_name(dt);
      if (is_floating(dt)) {
        EXPECT_TRUE(same(mean(xg, dims), mean(x, dims), t, t)) << dtype_name(dt);
      }
      EXPECT_TRUE(same(amax(xg, dims), amax(x, dims), 0, 0)) << dtype_name(dt);
      EXPECT_TRUE(same(amin(xg.transpose(0, 2), dims), amin(x.transpose(0, 2), dims), 0, 0)) << dtype_name(dt);
    }
    for (int64_t dim : {0, 1, 2}) {
      ValuesIndices g = max(xg, dim), c = max(x, dim);
      EXPECT_TRUE(same(g.values, c.values, 0, 0));
      EXPECT_TRUE(same(g.indices, c.indices, 0, 0));
      EXPECT_TRUE(same(argmin(xg, dim, true), argmin(x, dim, true), 0, 0));
    }
  }
  Tensor e = gpu(randu({0, 3}, 1));
  EXPECT_TRUE(same(sum(e, {0}), sum(host(e), {0}), 0, 0));
}

TEST(CudaOps, SoftmaxAndNorms) {
  uint64_t seed = 200;
  for (DType dt : float_dtypes()) {
    Tensor x = randu({8, 5, 1000}, seed++, dt, -5, 5), g = randu({8, 5, 1000}, seed++, dt);
    for (int64_t dim : {2, 1, 0}) {
      Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
      EXPECT_TRUE(same(softmax(gpu(x), dim), y, tol(dt), tol(dt) * 1e-2)) << dtype_name(dt) << " dim " << dim;
      EXPECT_TRUE(same(log_softmax(gpu(x), dim), ly, tol(dt), tol(dt))) << dtype_name(dt) << " dim " << dim;
      EXPECT_TRUE(same(softmax_backward(gpu(g), gpu(y), dim), softmax_backward(g, y, dim), tol(dt), tol(dt)));
      EXPECT_TRUE(same(log_softmax_backward(gpu(g), gpu(ly), dim), log_softmax_backward(g, ly, dim), tol(dt), tol(dt)));
    }
    Tensor w = randu({1000}, seed++, dt, 0.5, 1.5), b = randu({1000}, seed++, dt);
    LayerNormResult c = layer_norm(x, {1000}, w, b), r = layer_norm(gpu(x), {1000}, gpu(w), gpu(b));
    EXPECT_TRUE(same(r.out, c.out, tol(dt), tol(dt)));
    EXPECT_TRUE(same(r.rstd, c.rstd, 1e-5, 1e-6));
    LayerNormGrads cg = layer_norm_backward(g, x, {1000}, c.mean, c.rstd, w, b);
    LayerNormGrads rg = layer_norm_backward(gpu(g), gpu(x), {1000}, r.mean, r.rstd, gpu(w), gpu(b));
    EXPECT_TRUE(same(rg.grad_x, cg.grad_x, tol(dt) * 5, tol(dt) * 5));
    EXPECT_TRUE(same(rg.grad_weight, cg.grad_weight, tol(dt) * 10, tol(dt) * 10));
    EXPECT_TRUE(same(rg.grad_bias, cg.grad_bias, tol(dt) * 10, tol(dt) * 10));
    RmsNormResult rc = rms_norm(x, {5, 1000}), rr = rms_norm(gpu(x), {5, 1000});
    EXPECT_TRUE(same(rr.out, rc.out, tol(dt), tol(dt)));
    RmsNormGrads rcg = rms_norm_backward(g, x, {1000}, rms_norm(x, {1000}, w).rstd, w);
    RmsNormGrads rrg = rms_norm_backward(gpu(g), gpu(x), {1000}, rms_norm(gpu(x), {1000}, gpu(w)).rstd, gpu(w));
    EXPECT_TRUE(same(rrg.grad_x, rcg.grad_x, tol(dt) * 5, tol(dt) * 5));
    EXPECT_TRUE(same(rrg.grad_weight, rcg.grad_weight, tol(dt) * 10, tol(dt) * 10));
  }
}

TEST(CudaOps, EmbeddingAndCrossEntropy) {
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    Tensor w = randu({50, 16}, 1, dt), ids = randint({4, 9}, 2, 0, 49, DType::i32);
    EXPECT_TRUE(same(embedding(gpu(w), gpu(ids)), embedding(w, ids), 0, 0));
    Tensor g = randu({4, 9, 16}, 3, dt);
    EXPECT_TRUE(same(embedding_backward(gpu(g), gpu(ids), 50, 3), embedding_backward(g, ids, 50, 3), tol(dt), tol(dt)));
    Tensor logits = randu({64, 500}, 4, dt, -5, 5), t = randint({64}, 5, -1, 499, DType::i64);
    for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean}) {
      CrossEntropyResult c = cross_entropy(logits, t, -1, red), r = cross_entropy(gpu(logits), gpu(t), -1, red);
      EXPECT_TRUE(same(r.loss, c.loss, tol(dt), tol(dt)));
      Tensor gl = red == LossReduction::kNone ? randu({64}, 6, dt) : Tensor::full({}, 1.0, dt);
      EXPECT_TRUE(same(cross_entropy_backward(gpu(gl), gpu(logits), gpu(t), r.lse, -1, red),
                       cross_entropy_backward(gl, logits, t, c.lse, -1, red), tol(dt), tol(dt)));
    }
  }
  EXPECT_TRUE(throws_with(
      [] {
        embedding(gpu(randu({4, 2}, 1)), gpu(Tensor::from_data<int64_t>({0, 9}, {2})));
      },
      "id 9 at flat position 1"));
  EXPECT_TRUE(throws_with(
      [] {
        cross_entropy(gpu(randu({2, 3}, 1)), gpu(Tensor::from_data<int64_t>({3, 0}, {2})));
      },
      "target 3 at flat position 0"));
}

TEST(CudaOps, Matmul) {
  uint64_t seed = 300;
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{64, 48}, {48, 80}}, {{48}, {48}}, {{3, 65, 31}, {31, 17}}, {{2, 1, 7, 9}, {3, 9, 5}}, {{7, 0}, {0, 5}}};
  for (DType dt : float_dtypes()) {
    double t = dt == DType::f32 ? 1e-4 : tol(dt);
    for (auto [as, bs] : shapes) {
      Tensor a = randu(as, seed++, dt), b = randu(bs, seed++, dt);
      EXPECT_TRUE(same(matmul(gpu(a), gpu(b)), matmul(a, b), t, t)) << dtype_name(dt) << shape_str(as);
    }
    Tensor a = randu({40, 30}, seed++, dt), b = randu({20, 40}, seed++, dt);
    EXPECT_TRUE(same(matmul(gpu(a).t(), gpu(b).t()), matmul(a.t(), b.t()), t, t)) << "transposed " << dtype_name(dt);
    Tensor x = randu({2, 9, 30}, seed++, dt), w = randu({12, 30}, seed++, dt), bias = randu({12}, seed++, dt);
    EXPECT_TRUE(same(linear(gpu(x), gpu(w), gpu(bias)), linear(x, w, bias), t, t));
    Tensor g = randu({2, 9, 12}, seed++, dt);
    LinearGrads c = linear_backward(g, x, w), r = linear_backward(gpu(g), gpu(x), gpu(w));
    EXPECT_TRUE(same(r.grad_x, c.grad_x, t, t));
    EXPECT_TRUE(same(r.grad_weight, c.grad_weight, t, t));
    EXPECT_TRUE(same(r.grad_bias, c.grad_bias, t, t));
  }
  EXPECT_TRUE(throws_with(
      [] {
        matmul(gpu(randint({2, 2}, 1, 0, 3, DType::i32)), gpu(randint({2, 2}, 2, 0, 3, DType::i32)));
      },
      "only supported on the CPU"));
}

// The fused attention (warp per row) against the CPU's tiles: causal and not, grouped-query, a decode step, left
// padding, a strided KV-cache view, f32 / f64 / bf16; and rope with per-row tables.
TEST(CudaOps, AttentionAndRope) {
  struct Case {
    int64_t b, hq, hkv, tq, tk, d;
    bool causal;
    std::vector<int64_t> key_start;
  };
  uint64_t seed = 300;
  for (const Case& c : {Case{2, 4, 2, 37, 37, 64, true, {}}, Case{1, 2, 2, 5, 9, 16, false, {}},
                        Case{2, 8, 1, 1, 40, 128, true, {3, 0}}, Case{3, 2, 2, 12, 12, 32, true, {0, 5, 11}}})
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      const Tensor q = randu({c.b, c.hq, c.tq, c.d}, seed++, dt), dout = randu({c.b, c.hq, c.tq, c.d}, seed++, dt);
      const Tensor cache_k = randu({c.b, c.hkv, c.tk + 3, c.d}, seed++, dt),
                   cache_v = randu({c.b, c.hkv, c.tk + 3, c.d}, seed++, dt);
      const Tensor k = cache_k.narrow(2, 0, c.tk), v = cache_v.narrow(2, 0, c.tk);
      AttentionOptions o;
      o.causal = c.causal;
      o.key_start = c.key_start;
      const AttentionResult want = attention(q, k, v, o);
      const AttentionResult got =
          attention(gpu(q), gpu(cache_k).narrow(2, 0, c.tk), gpu(cache_v).narrow(2, 0, c.tk), o);
      EXPECT_TRUE(same(got.out, want.out, tol(dt), tol(dt))) << "out " << dtype_name(dt) << " tq " << c.tq;
      EXPECT_TRUE(same(got.lse, want.lse, tol(dt), tol(dt))) << "lse " << dtype_name(dt) << " tq " << c.tq;
      const AttentionGrads gw = attention_backward(dout, q, k, v, want.out, want.lse, o);
      const AttentionGrads gg = attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), got.out, got.lse, o);
      const double gt = dt == DType::bf16 ? 5e-2 : 10 * tol(dt);
      EXPECT_TRUE(same(gg.dq, gw.dq, gt, gt)) << "dq " << dtype_name(dt) << " tq " << c.tq;
      EXPECT_TRUE(same(gg.dk, gw.dk, gt, gt)) << "dk " << dtype_name(dt) << " tq " << c.tq;
      EXPECT_TRUE(same(gg.dv, gw.dv, gt, gt)) << "dv " << dtype_name(dt) << " tq " << c.tq;
    }
  const Tensor x = randu({3, 2, 5, 8}, seed++), cos = randu({3, 5, 8}, seed++), sin = randu({3, 5, 8}, seed++);
  EXPECT_TRUE(same(rope(gpu(x), gpu(cos), gpu(sin)), rope(x, cos, sin), tol(DType::f32), tol(DType::f32)));
}

TEST(CudaOps, ShapeOpsAndStreams) {
  Tensor a = randu({3, 4}, 1), b = randu({3, 2}, 2);
  EXPECT_TRUE(same(cat({gpu(a), gpu(b).t().t()}, 1), cat({a, b}, 1), 0, 0));
  EXPECT_TRUE(same(stack({gpu(a), gpu(a)}, 1), stack({a, a}, 1), 0, 0));
  EXPECT_TRUE(same(split(gpu(a), {1, 3}, 1)[1], split(a, {1, 3}, 1)[1], 0, 0));
  EXPECT_TRUE(same(tril(gpu(a), 1), tril(a, 1), 0, 0));
  EXPECT_TRUE(same(triu(gpu(randu({2, 5, 3}, 3)), -1), triu(randu({2, 5, 3}, 3), -1), 0, 0));
  EXPECT_TRUE(same(causal_mask(5, 7, 2, Device::cuda(0)), causal_mask(5, 7, 2), 0, 0));
  EXPECT_TRUE(same(arange(0, 3, 0.5, DType::f32, Device::cuda(0)), arange(0, 3, 0.5, DType::f32), 0, 0));
  // Work queued on an explicit stream, then synchronised.
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  Stream st{s};
  Tensor x = randu({128, 64}, 4), w = randu({32, 64}, 5);
  Tensor xg = gpu(x), wg = gpu(w);
  Tensor y = softmax(add_scalar(linear(xg, wg, Tensor(), st), 1.0, st), -1, st);
  Tensor l = sum(y, {1}, false, st);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(same(y, softmax(add_scalar(linear(x, w), 1.0), -1), 1e-4, 1e-6));
  EXPECT_TRUE(same(l, sum(softmax(add_scalar(linear(x, w), 1.0), -1), {1}), 1e-4, 1e-5));
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace dt::kernels
