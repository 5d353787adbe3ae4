// embedding lookup / backward and cross-entropy against loops in double: id dtypes, padding_idx, ignore_index,
// the three reductions, class-last layouts and range errors.
#include <cmath>

#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "tests/kernels/ops/ops_test_util.h"

namespace dt::kernels {
namespace {

using namespace ops_test;

TEST(OpsEmbedding, LookupMatchesRows) {
  uint64_t seed = 1;
  for (DType wdt : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    for (DType idt : {DType::i64, DType::i32, DType::u8}) {
      for (const Shape& ids_shape : {Shape{5}, Shape{2, 3}, Shape{}, Shape{0, 4}}) {
        for (bool nc : {false, true}) {
          Tensor w = is_floating(wdt) ? randu({10, 6}, seed++, wdt) : randint({10, 6}, seed++, -9, 9, wdt);
          if (nc) w = noncontig(w);
          Tensor ids = randint(ids_shape, seed++, 0, 9, idt);
          if (nc) ids = noncontig(ids);
          Tensor y = embedding(w, ids);
          Shape want_shape = ids_shape;
          want_shape.push_back(6);
          ASSERT_EQ(y.shape(), want_shape);
          EXPECT_EQ(y.dtype(), wdt);
          std::vector<double> wv = w.to_vector(), iv = ids.to_vector(), want;
          for (double id : iv)
            for (int j = 0; j < 6; ++j) want.push_back(wv[size_t(int64_t(id) * 6 + j)]);
          EXPECT_TRUE(all_close(y, want, 0))
              << dtype_name(wdt) << " ids " << dtype_name(idt) << " " << shape_str(ids_shape);
        }
      }
    }
  }
}

TEST(OpsEmbedding, OutOfRangeIdsAreErrors) {
  Tensor w = randu({4, 3}, 1);
  EXPECT_TRUE(throws_with(
      [&] {
        embedding(w, Tensor::from_data<int64_t>({0, 4, 1}, {3}));
      },
      "id 4 at flat position 1"));
  EXPECT_TRUE(throws_with([&] { embedding(w, Tensor::from_data<int32_t>({-1}, {1})); }, "out of range"));
  EXPECT_TRUE(throws_with([&] { embedding(w, randu({2}, 3)); }, "integer dtype"));
  EXPECT_TRUE(throws_with([&] { embedding(randu({4}, 3), Tensor::from_data<int64_t>({0}, {1})); }, "2-d"));
  EXPECT_TRUE(throws_with(
      [&] {
        embedding_backward(randu({3, 3}, 2), Tensor::from_data<int64_t>({0, 1, 7}, {3}), 5);
      },
      "out of range"));
}

TEST(OpsEmbedding, BackwardScatterAdds) {
  uint64_t seed = 10;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (bool with_pad : {false, true}) {
      // Many repeats of few ids: accumulation matters.
      Tensor ids = randint({4, 25}, seed++, 0, 6, DType::i64);
      Tensor g = noncontig(randu({4, 25, 5}, seed++, dt));
      std::optional<int64_t> pad = with_pad ? std::optional<int64_t>(-2) : std::nullopt;  // -2 wraps to 5
      Tensor gw = embedding_backward(g, ids, 7, pad);
      ASSERT_EQ(gw.shape(), (Shape{7, 5}));
      EXPECT_EQ(gw.dtype(), dt);
      std::vector<double> want(35, 0.0), gv = g.to_vector(), iv = ids.to_vector();
      for (size_t i = 0; i < iv.size(); ++i) {
        int64_t id = int64_t(iv[i]);
        if (with_pad && id == 5) continue;
        for (int j = 0; j < 5; ++j) want[size_t(id * 5 + j)] += gv[i * 5 + size_t(j)];
      }
      double atol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-5 : 0.1;
      EXPECT_TRUE(all_close(gw, want, rtol_for(dt), atol)) << dtype_name(dt) << (with_pad ? " padding_idx" : "");
    }
  }
  EXPECT_TRUE(throws_with(
      [] {
        embedding_backward(randu({2, 3}, 1), Tensor::from_data<int64_t>({0, 1}, {2}), 4, 4);
      },
      "padding_idx"));
}

struct CeRef {
  std::vector<double> row_loss, lse;
  int64_t valid = 0;
};

CeRef ref_ce(const Tensor& logits, const Tensor& targets, int64_t ignore) {
  int64_t C = logits.size(-1), rows = targets.numel();
  std::vector<double> x = logits.to_vector(), t = targets.to_vector();
  CeRef r;
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[size_t(i * C + c)]);
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[size_t(i * C + c)] - mx);
    double lse = mx + std::log(s);
    r.lse.push_back(lse);
    int64_t ti = int64_t(t[size_t(i)]);
    if (ti == ignore) {
      r.row_loss.push_back(0);
    } else {
      r.row_loss.push_back(lse - x[size_t(i * C + ti)]);
      ++r.valid;
    }
  }
  return r;
}

TEST(OpsCrossEntropy, ReductionsMatchReference) {
  uint64_t seed = 30;
  for (DType dt : float_dtypes()) {
    for (const Shape& ls : {Shape{6, 5}, Shape{2, 3, 7}, Shape{1, 1000}, Shape{0, 4}}) {
      for (bool nc : {false, true}) {
        Tensor logits = randu(ls, seed++, dt, -4, 4);
        if (nc) logits = noncontig(logits);
        Shape ts(ls.begin(), ls.end() - 1);
        Tensor targets = randint(ts, seed++, -1, ls.back() - 1, DType::i64);  // -1 = ignored
        CeRef r = ref_ce(logits, targets, -1);
        double atol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 2e-2;
        std::string what = str_cat(dtype_name(dt), " ", shape_str(ls), nc ? " non-contiguous" : "");
        CrossEntropyResult none = cross_entropy(logits, targets, -1, LossReduction::kNone);
        ASSERT_EQ(none.loss.shape(), ts) << what;
        EXPECT_EQ(none.loss.dtype(), dt);
        EXPECT_TRUE(all_close(none.loss, r.row_loss, rtol_for(dt), atol)) << what;
        EXPECT_TRUE(all_close(none.lse, r.lse, 1e-5, 1e-5)) << what;
        double total = 0;
        for (double v : r.row_loss) total += v;
        CrossEntropyResult s = cross_entropy(logits, targets, -1, LossReduction::kSum);
        EXPECT_EQ(s.loss.dim(), 0);
        EXPECT_TRUE(close(s.loss.item(), total, rtol_for(dt), atol * double(r.row_loss.size()) + 1e-300)) << what;
        CrossEntropyResult m = cross_entropy(logits, targets, -1, LossReduction::kMean);
        if (r.valid == 0) {
          EXPECT_TRUE(std::isnan(m.loss.item())) << what;
        } else {
          EXPECT_TRUE(close(m.loss.item(), total / double(r.valid), rtol_for(dt), atol)) << what;
        }
      }
    }
  }
}

TEST(OpsCrossEntropy, DefaultIgnoreIndexAndAllIgnored) {
  Tensor logits = randu({3, 4}, 5);
  Tensor t = Tensor::from_data<int32_t>({1, -100, 3}, {3});
  CeRef r = ref_ce(logits, t, -100);
  EXPECT_NEAR(cross_entropy(logits, t).loss.item(), (r.row_loss[0] + r.row_loss[2]) / 2, 1e-5);
  Tensor all = Tensor::from_data<int64_t>({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(cross_entropy(logits, all).loss.item()));
  EXPECT_DOUBLE_EQ(cross_entropy(logits, all, -100, LossReduction::kSum).loss.item(), 0);
}

TEST(OpsCrossEntropy, Errors) {
  Tensor logits = randu({3, 4}, 5);
  EXPECT_TRUE(throws_with(
      [&] {
        cross_entropy(logits, Tensor::from_data<int64_t>({0, 4, 1}, {3}));
      },
      "target 4 at flat position 1"));
  EXPECT_TRUE(throws_with([&] { cross_entropy(logits, Tensor::from_data<int64_t>({0, 1}, {2})); }, "leading shape"));
  EXPECT_TRUE(throws_with([&] { cross_entropy(logits, randu({3}, 2)); }, "integer dtype"));
  EXPECT_TRUE(throws_with(
      [&] {
        cross_entropy_backward(randu({3}, 1), logits, Tensor::from_data<int64_t>({0, 1, 2}, {3}), Tensor());
      },
      "must be 0-d"));
}

}  // namespace
}  // namespace dt::kernels
