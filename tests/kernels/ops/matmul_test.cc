// matmul / linear against triple loops in double: torch's 1-d rules, broadcast batch dims, transposed and
// otherwise strided operands (no-copy and copy paths), empty dims, every supported dtype, and errors.
#include "kernels/ops/matmul.h"

#include <cmath>

#include "kernels/cpu/parallel.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

// Reference matmul with torch semantics in double. Also returns sum |a||b| per output (the error scale).
struct Ref {
  Shape shape;
  std::vector<double> v, scale;
};

Ref ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape batch = bcast(ab, bb);
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  Ref r;
  r.shape = batch;
  if (!a1) r.shape.push_back(M);
  if (!b1) r.shape.push_back(N);
  int64_t B = shape_numel(batch);
  for (int64_t bi = 0; bi < B; ++bi) {
    auto bidx = unravel(bi, batch);
    auto base = [&](const Shape& s) {  // element offset of the matrix of batch bidx in a row-major [s] tensor
      size_t lead = bidx.size() - (s.size() - 2);
      int64_t lin = 0;
      for (size_t d = 0; d + 2 < s.size(); ++d) lin = lin * s[d] + (s[d] == 1 ? 0 : bidx[lead + d]);
      return lin * s[s.size() - 2] * s.back();
    };
    int64_t ao = base(as), bo = base(bs);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, sc = 0;
        for (int64_t l = 0; l < K; ++l) {
          double p = av[size_t(ao + i * K + l)] * bv[size_t(bo + l * N + j)];
          s += p;
          sc += std::fabs(p);
        }
        r.v.push_back(s);
        r.scale.push_back(sc);
      }
  }
  return r;
}

::testing::AssertionResult matches(const Tensor& got, const Ref& r, DType dt) {
  if (got.shape() != r.shape)
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs " << shape_str(r.shape);
  std::vector<double> g = got.to_vector();
  double rt = dt == DType::f32 ? 1e-6 : rtol_for(dt);  // relative to sum |a_il b_lj|
  for (size_t i = 0; i < g.size(); ++i) {
    double tol = rt * (r.scale[i] + std::fabs(r.v[i]));
    if (!(std::fabs(g[i] - r.v[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g[i] << " want " << r.v[i] << " tol " << tol;
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  Shape a, b;
};
const std::vector<Case> kCases = {
    {{3, 4}, {4, 5}},
    {{1, 4}, {4, 1}},
    {{4}, {4}},
    {{4}, {4, 5}},
    {{3, 4}, {4}},
    {{2, 3, 4}, {4, 5}},
    {{2, 3, 4}, {2, 4, 5}},
    {{2, 1, 3, 4}, {5, 4, 2}},
    {{7, 0}, {0, 3}},
    {{0, 3}, {3, 2}},
    {{17, 33}, {33, 9}},
    {{4}, {3, 4, 2}},
    {{3, 2, 5}, {5}},
    {{1, 5, 6}, {3, 6, 1}},
    {{2, 3, 0, 4}, {4, 2}},
    {{1}, {1}},
};

TEST(OpsMatmul, MatchesReferenceForTorchShapes) {
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (const Case& c : kCases) {
      for (bool nc : {false, true}) {
        Tensor a = is_floating(dt) ? randu(c.a, seed++, dt) : randint(c.a, seed++, -5, 5, dt);
        Tensor b = is_floating(dt) ? randu(c.b, seed++, dt) : randint(c.b, seed++, -5, 5, dt);
        if (nc) {
          a = noncontig(a);
          b = noncontig(b);
        }
        Tensor y = matmul(a, b);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_TRUE(matches(y, ref_matmul(a, b), dt))
            << dtype_name(dt) << " " << shape_str(c.a) << " @ " << shape_str(c.b) << (nc ? " non-contiguous" : "");
      }
    }
  }
}

TEST(OpsMatmul, TransposedAndStridedOperands) {
  Tensor base_a = randu({6, 5}, 10), base_b = randu({7, 6}, 11);
  // a^T and b^T as views (transpose flags, no copy).
  Tensor a = base_a.t(), b = base_b.t();  // [5, 6] @ [6, 7]
  EXPECT_TRUE(matches(matmul(a, b), ref_matmul(a, b), DType::f32));
  // Column-strided views (neither stride is 1): copied before GEMM.
  Tensor wide = randu({6, 10}, 12);
  Tensor every_other = wide.as_strided({6, 5}, {10, 2}, 0);
  EXPECT_TRUE(matches(matmul(every_other.t(), wide.narrow(1, 0, 3)), ref_matmul(every_other.t(), wide.narrow(1, 0, 3)),
                      DType::f32));
  // Narrowed rows (leading dim larger than the number of columns).
  Tensor big = randu({9, 12}, 13);
  Tensor sub_a = big.narrow(1, 2, 5).narrow(0, 1, 4);  // [4, 5] with ld 12
  Tensor sub_b = big.narrow(0, 0, 5).narrow(1, 3, 8);  // [5, 8] with ld 12
  EXPECT_TRUE(matches(matmul(sub_a, sub_b), ref_matmul(sub_a, sub_b), DType::f32));
  // Batched with permuted batch dims (batch stride not uniform: materialised) and a broadcast batch operand.
  Tensor p = randu({3, 2, 4, 5}, 14).permute({1, 0, 2, 3});  // [2, 3, 4, 5], batch dims swapped
  Tensor q = randu({5, 6}, 15).unsqueeze(0).expand({3, 5, 6});
  EXPECT_TRUE(matches(matmul(p, q), ref_matmul(p, q), DType::f32));
  // Batch-transposed left operand with a shared right operand (cannot fold into one GEMM).
  Tensor l = randu({4, 5, 3}, 16).transpose(1, 2);  // [4, 3, 5]
  Tensor r = randu({5, 2}, 17);
  EXPECT_TRUE(matches(matmul(l, r), ref_matmul(l, r), DType::f32));
  // Batched left operands whose batches are not evenly spaced rows (must not fold into one GEMM): narrowed rows
  // and a broadcast batch.
  Tensor gap = randu({2, 5, 5}, 19).narrow(1, 1, 3);  // [2, 3, 5], batch stride 25, row stride 5
  EXPECT_TRUE(matches(matmul(gap, r), ref_matmul(gap, r), DType::f32));
  Tensor shared = randu({4, 5}, 20).unsqueeze(0).expand({3, 4, 5});
  EXPECT_TRUE(matches(matmul(shared, r), ref_matmul(shared, r), DType::f32));
  // Expanded rows (stride 0 inside the matrix).
  Tensor row = randu({1, 5}, 18).expand({4, 5});
  EXPECT_TRUE(matches(matmul(row, r), ref_matmul(row, r), DType::f32));
}

// One row or one column (a decode step's x [1, dim] @ W^T): the GEMV path (Note [GEMV for one row]), with every
// operand stored plain, transposed or narrowed (a leading dim wider than the matrix), f32 and f64, and batched.
TEST(OpsMatmul, OneRowAndOneColumnProducts) {
  uint64_t seed = 40;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor wide = randu({13, 21}, seed++, dt);
    const Tensor b_plain = randu({7, 9}, seed++, dt), b_trans = randu({9, 7}, seed++, dt).t(),
                 b_narrow = wide.narrow(0, 2, 7).narrow(1, 3, 9);
    const Tensor a_row = randu({1, 7}, seed++, dt), a_trans = randu({7, 1}, seed++, dt).t(),
                 a_strided = wide.narrow(1, 4, 1).narrow(0, 0, 7).t();  // [1, 7], elements 21 apart
    for (const Tensor* a : {&a_row, &a_trans, &a_strided})
      for (const Tensor* b : {&b_plain, &b_trans, &b_narrow}) {
        EXPECT_TRUE(matches(matmul(*a, *b), ref_matmul(*a, *b), dt)) << "row " << dtype_name(dt);
        // The transposed problem: one column.
        const Tensor bt = b->t(), at = a->t();
        EXPECT_TRUE(matches(matmul(bt, at), ref_matmul(bt, at), dt)) << "column " << dtype_name(dt);
      }
    const Tensor x = randu({3, 1, 7}, seed++, dt), w = randu({5, 7}, seed++, dt);
    EXPECT_TRUE(matches(linear(x, w), ref_matmul(x, w.t()), dt)) << "batched rows " << dtype_name(dt);
  }
}

TEST(OpsMatmul, LinearMatchesReference) {
  uint64_t seed = 40;
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (const Shape& xs : {Shape{5}, Shape{3, 5}, Shape{2, 3, 5}, Shape{0, 5}, Shape{2, 0, 5}}) {
      for (bool with_bias : {false, true}) {
        for (bool nc : {false, true}) {
          Tensor x = randu(xs, seed++, dt), w = randu({4, 5}, seed++, dt), b = randu({4}, seed++, dt);
          if (nc) {
            x = noncontig(x);
            w = noncontig(w);
          }
          Tensor y = with_bias ? linear(x, w, b) : linear(x, w);
          Ref r = ref_matmul(x, w.t());
          if (with_bias) {
            std::vector<double> bv = b.to_vector();
            for (size_t i = 0; i < r.v.size(); ++i) {
              r.v[i] += bv[i % 4];
              r.scale[i] += std::fabs(bv[i % 4]);
            }
          }
          EXPECT_TRUE(matches(y, r, dt)) << dtype_name(dt) << " x " << shape_str(xs) << (with_bias ? " bias" : "")
                                         << (nc ? " non-contiguous" : "");
        }
      }
    }
  }
}

// bf16 products large enough to be split over intra-op threads (Note [bf16 GEMM on the CPU]: each part one oneDNN
// call where the CPU multiplies bf16 natively, else the f32 conversion path): by columns, by rows and by batch, with
// transposed, narrowed and broadcast operands, and linear with a bias, against the double reference.
TEST(OpsMatmul, Bf16ProductsSplitOverThreads) {
  const int saved = intra_op_threads();
  set_intra_op_threads(2);
  const DType dt = DType::bf16;
  uint64_t seed = 70;
  const Tensor wide_b = randu({384, 320}, seed++, dt), tall_a = randu({600, 384}, seed++, dt);
  const Tensor a_t = randu({384, 96}, seed++, dt).t(), b_t = randu({320, 384}, seed++, dt).t();
  const Tensor narrow_a = randu({200, 500}, seed++, dt).narrow(1, 7, 384);
  const Tensor batch_a = randu({4, 64, 96}, seed++, dt), batch_b = randu({4, 96, 80}, seed++, dt);
  const Tensor shared_a = randu({3, 70, 96}, seed++, dt);
  const Tensor shared_b = randu({96, 90}, seed++, dt).unsqueeze(0).expand({3, 96, 90});
  const Tensor row = randu({1, 384}, seed++, dt);
  const std::vector<std::pair<Tensor, Tensor>> products = {
      {a_t, wide_b},         // n > m: split by columns; A transposed
      {tall_a, b_t},         // m > n: split by rows; B transposed
      {narrow_a, wide_b},    // a leading dim wider than the matrix
      {batch_a, batch_b},    // batch >= threads: split by batch
      {shared_a, shared_b},  // a broadcast right operand
      {row, wide_b},         // one row
  };
  for (const auto& [a, b] : products)
    EXPECT_TRUE(matches(matmul(a, b), ref_matmul(a, b), dt)) << shape_str(a.shape()) << " @ " << shape_str(b.shape());
  const Tensor x = randu({2, 130, 96}, seed++, dt), w = randu({300, 96}, seed++, dt), bias = randu({300}, seed++, dt);
  Ref r = ref_matmul(x, w.t());
  const std::vector<double> bv = bias.to_vector();
  for (size_t i = 0; i < r.v.size(); ++i) {
    r.v[i] += bv[i % 300];
    r.scale[i] += std::fabs(bv[i % 300]);
  }
  EXPECT_TRUE(matches(linear(x, w, bias), r, dt)) << "linear with bias";
  set_intra_op_threads(saved);
}

TEST(OpsMatmul, ZeroInnerDimGivesZerosOrBias) {
  Tensor y = matmul(randu({3, 0}, 1), randu({0, 4}, 2));
  EXPECT_TRUE(all_close(y, std::vector<double>(12, 0.0), 0));
  Tensor b = randu({2}, 3);
  Tensor z = linear(randu({3, 0}, 4), randu({2, 0}, 5), b);
  std::vector<double> bv = b.to_vector();
  EXPECT_TRUE(all_close(z, {bv[0], bv[1], bv[0], bv[1], bv[0], bv[1]}, 0));
}

TEST(OpsMatmul, ArgumentErrors) {
  EXPECT_TRUE(throws_with([] { matmul(randu({3, 4}, 1), randu({5, 2}, 2)); }, "cannot be multiplied"));
  EXPECT_TRUE(throws_with([] { matmul(Tensor::full({}, 1.0), randu({2}, 2)); }, "at least 1 dim"));
  EXPECT_TRUE(throws_with([] { matmul(randu({2, 2}, 1), randu({2, 2}, 2, DType::f64)); }, "same dtype"));
  EXPECT_TRUE(throws_with([] { matmul(randu({2, 3, 4}, 1), randu({3, 4, 5}, 2)); }, "cannot be broadcast"));
  EXPECT_TRUE(throws_with([] { linear(randu({2, 3}, 1), randu({4, 5}, 2)); }, "in_features"));
  EXPECT_TRUE(throws_with([] { linear(randu({2, 3}, 1), randu({4, 3}, 2), randu({3}, 3)); }, "bias must have shape"));
  EXPECT_TRUE(throws_with([] { linear(randu({2, 3}, 1), randu({3}, 2)); }, "weight must be 2-d"));
}

TEST(OpsMatmul, BlasThreads) {
  int before = blas_threads();
  EXPECT_GE(before, 1);
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  set_blas_threads(before);
  EXPECT_TRUE(throws_with([] { set_blas_threads(0); }, "at least 1"));
}

}  // namespace
}  // namespace dt::kernels
