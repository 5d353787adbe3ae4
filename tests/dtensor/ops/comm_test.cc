// Communication counts of the key transformer patterns (CommCounter), with results checked against the kernels on
// full tensors: tensor-parallel MLP and attention cost exactly one all-reduce (or one reduce-scatter with sequence
// parallelism), loss parallel never all-gathers the logits, a row-sharded embedding costs one all-reduce.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/comm_counter.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/softmax.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;

bool close(const Tensor& got, const Tensor& want) {
  std::string why;
  bool ok = op_test::compare(got, want, false, &why);
  if (!ok) ADD_FAILURE() << why;
  return ok;
}

struct MlpWeights {
  Tensor x = Tensor::randn({2, 3, 8}, 11);
  Tensor w1 = Tensor::randn({16, 8}, 12, DType::f32, 0, 0.3);
  Tensor b1 = Tensor::randn({16}, 13);
  Tensor w2 = Tensor::randn({8, 16}, 14, DType::f32, 0, 0.3);
  Tensor b2 = Tensor::randn({8}, 15);
  Tensor reference() const { return kernels::linear(kernels::gelu(kernels::linear(x, w1, b1)), w2, b2); }
};

// Column-parallel then row-parallel linear: no communication until the output, then exactly one all-reduce.
TEST(DTensorOpsComm, TensorParallelMlpIsOneAllReduce) {
  MlpWeights m;
  Tensor want = m.reference();
  for (bool sequence_parallel : {false, true}) {
    op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
      ops::ImplicitRedistributeGuard strict(ops::ImplicitRedistribute::kError);  // no hidden communication
      DTensor x = distribute_tensor(m.x, mesh, {Replicate{}});
      DTensor w1 = distribute_tensor(m.w1, mesh, {Shard{0}}), b1 = distribute_tensor(m.b1, mesh, {Shard{0}});
      DTensor w2 = distribute_tensor(m.w2, mesh, {Shard{1}}), b2 = distribute_tensor(m.b2, mesh, {Replicate{}});
      CommCounter counter(mesh);
      DTensor h = gelu(linear(x, w1, b1));
      EXPECT_TRUE(h.placements()[0] == Placement(Shard{2})) << h.describe();
      DTensor y = linear(h, w2, b2);
      EXPECT_TRUE(y.placements()[0] == Placement(Partial{})) << y.describe();
      EXPECT_EQ(counter.total(), 0) << counter.summary();
      if (sequence_parallel) {
        DTensor ys = y.redistribute({Shard{1}});
        EXPECT_EQ(counter.count(CollectiveKind::kReduceScatter), 1) << counter.summary();
        EXPECT_EQ(counter.total(), 1) << counter.summary();
        counter.reset();
        close(ys.full_tensor(), want);
      } else {
        DTensor yr = y.redistribute({Replicate{}});
        EXPECT_EQ(counter.count(CollectiveKind::kAllReduce), 1) << counter.summary();
        EXPECT_EQ(counter.total(), 1) << counter.summary();
        close(yr.to_local(), want);
      }
    });
  }
}

// The same on a (dp, tp) mesh with the batch sharded over dp: one all-reduce, on the tp dim only.
TEST(DTensorOpsComm, TensorParallelMlpOn2dMesh) {
  MlpWeights m;
  Tensor want = m.reference();
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    ops::ImplicitRedistributeGuard strict(ops::ImplicitRedistribute::kError);
    DTensor x = distribute_tensor(m.x, mesh, {Shard{0}, Replicate{}});
    DTensor w1 = distribute_tensor(m.w1, mesh, {Replicate{}, Shard{0}});
    DTensor b1 = distribute_tensor(m.b1, mesh, {Replicate{}, Shard{0}});
    DTensor w2 = distribute_tensor(m.w2, mesh, {Replicate{}, Shard{1}});
    DTensor b2 = distribute_tensor(m.b2, mesh, {Replicate{}, Replicate{}});
    CommCounter counter(mesh);
    DTensor y = linear(gelu(linear(x, w1, b1)), w2, b2).redistribute({Shard{0}, Replicate{}});
    EXPECT_EQ(counter.count(CollectiveKind::kAllReduce, 1), 1) << counter.summary();
    EXPECT_EQ(counter.total(), 1) << counter.summary();
    close(y.full_tensor(), want);
  });
}

// Heads sharded over tp: q/k/v column-parallel, reshape to heads, attention per head, output row-parallel.
TEST(DTensorOpsComm, TensorParallelAttentionIsOneAllReduce) {
  const int64_t b = 2, s = 4, nh = 4, hd = 2, h = nh * hd;
  Tensor x = Tensor::randn({b, s, h}, 21);
  Tensor wq = Tensor::randn({h, h}, 22, DType::f32, 0, 0.4), wk = Tensor::randn({h, h}, 23, DType::f32, 0, 0.4);
  Tensor wv = Tensor::randn({h, h}, 24, DType::f32, 0, 0.4), wo = Tensor::randn({h, h}, 25, DType::f32, 0, 0.4);
  std::vector<double> m(size_t(s * s));
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j) m[size_t(i * s + j)] = j > i;  // true = masked (future)
  Tensor mask = Tensor::from_vector(m, {s, s}, DType::b8);
  const double scale = 1.0 / std::sqrt(double(hd));

  auto heads = [&](const Tensor& t) { return t.reshape({b, s, nh, hd}).transpose(1, 2); };
  Tensor q = heads(kernels::linear(x, wq)), k = heads(kernels::linear(x, wk)), v = heads(kernels::linear(x, wv));
  Tensor sc =
      kernels::masked_fill(kernels::mul_scalar(kernels::matmul(q, k.transpose(-2, -1)), scale), mask, -INFINITY);
  Tensor o = kernels::matmul(kernels::softmax(sc, -1), v).transpose(1, 2).reshape({b, s, h});
  Tensor want = kernels::linear(o, wo);

  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    ops::ImplicitRedistributeGuard strict(ops::ImplicitRedistribute::kError);
    DTensor dx = distribute_tensor(x, mesh, {Replicate{}});
    DTensor dmask = distribute_tensor(mask, mesh, {Replicate{}});
    // Every rank holds the weights (std::nullopt): distributing them communicates nothing inside the counted region.
    auto col = [&](const Tensor& w) { return distribute_tensor(w, mesh, {Shard{0}}, {}, std::nullopt); };
    CommCounter counter(mesh);
    auto dheads = [&](const DTensor& t) { return transpose(reshape(t, {b, s, nh, hd}), 1, 2); };
    DTensor dq = dheads(linear(dx, col(wq))), dk = dheads(linear(dx, col(wk))), dv = dheads(linear(dx, col(wv)));
    EXPECT_TRUE(dq.placements()[0] == Placement(Shard{1})) << dq.describe();  // heads
    DTensor dsc = masked_fill(matmul(dq, transpose(dk, -2, -1)) * scale, dmask, -INFINITY);
    DTensor dout = reshape(transpose(matmul(softmax(dsc, -1), dv), 1, 2), {b, s, h});
    EXPECT_TRUE(dout.placements()[0] == Placement(Shard{2})) << dout.describe();
    DTensor y = linear(dout, distribute_tensor(wo, mesh, {Shard{1}}, {}, std::nullopt));
    EXPECT_EQ(counter.total(), 0) << counter.summary();
    DTensor yr = y.redistribute({Replicate{}});
    EXPECT_EQ(counter.count(CollectiveKind::kAllReduce), 1) << counter.summary();
    EXPECT_EQ(counter.total(), 1) << counter.summary();
    close(yr.to_local(), want);
  });
}

// Loss parallel: vocab-sharded lm head -> class-sharded logits -> cross_entropy without gathering the logits.
TEST(DTensorOpsComm, LossParallelNeverGathersLogits) {
  const int64_t rows = 6, hidden = 8, vocab = 11;  // 11 classes: uneven over 2 and 4
  Tensor hs = Tensor::randn({rows, hidden}, 31);
  Tensor w = Tensor::randn({vocab, hidden}, 32);
  Tensor targets = Tensor::from_data<int64_t>({3, -100, 10, 0, 7, 5}, {rows});
  for (auto red : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
    Tensor want = kernels::cross_entropy(kernels::linear(hs, w), targets, -100, red).loss;
    op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
      DTensor logits = linear(distribute_tensor(hs, mesh, {Replicate{}}), distribute_tensor(w, mesh, {Shard{0}}));
      EXPECT_TRUE(logits.placements()[0] == Placement(Shard{1}));
      CommCounter counter(mesh);
      DTensor loss =
          cross_entropy(logits, distribute_tensor(targets, mesh, {Replicate{}}, {}, std::nullopt), -100, red);
      EXPECT_EQ(counter.count(CollectiveKind::kAllGather), 0) << counter.summary();
      EXPECT_EQ(counter.count(CollectiveKind::kAllReduce), 2) << counter.summary();  // row max, (sum exp, target)
      EXPECT_TRUE(loss.spec().is_replicated());
      close(loss.to_local(), want);
    });
    // (dp, tp): rows over dp, classes over tp.
    op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
      DTensor logits = linear(distribute_tensor(hs, mesh, {Shard{0}, Replicate{}}),
                              distribute_tensor(w, mesh, {Replicate{}, Shard{0}}));
      CommCounter counter(mesh);
      DTensor loss =
          cross_entropy(logits, distribute_tensor(targets, mesh, {Shard{0}, Replicate{}}, {}, std::nullopt), -100, red);
      EXPECT_EQ(counter.count(CollectiveKind::kAllGather), 0) << counter.summary();
      close(loss.full_tensor(), want);
    });
  }
}

// Vocab-parallel embedding: row-sharded table -> P(sum) -> one all-reduce (or one reduce-scatter for S(seq)).
TEST(DTensorOpsComm, RowShardedEmbeddingIsOneReduction) {
  Tensor ids = Tensor::from_data<int64_t>({0, 6, 3, 2, 5, 1, 4, 6}, {2, 4});
  Tensor table = Tensor::randn({7, 6}, 41);
  Tensor want = kernels::embedding(table, ids);
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    ops::ImplicitRedistributeGuard strict(ops::ImplicitRedistribute::kError);
    DTensor e = embedding(distribute_tensor(ids, mesh, {Replicate{}}), distribute_tensor(table, mesh, {Shard{0}}));
    EXPECT_TRUE(e.placements()[0] == Placement(Partial{}));
    CommCounter counter(mesh);
    DTensor r = e.redistribute({Replicate{}});
    DTensor sp = e.redistribute({Shard{1}});
    EXPECT_EQ(counter.count(CollectiveKind::kAllReduce), 1) << counter.summary();
    EXPECT_EQ(counter.count(CollectiveKind::kReduceScatter), 1) << counter.summary();
    EXPECT_EQ(counter.total(), 2) << counter.summary();
    EXPECT_TRUE(equal(r.to_local(), want));
    EXPECT_TRUE(equal(sp.full_tensor(), want));
  });
}

}  // namespace
}  // namespace dt
