// The intra-op pool: every index covered exactly once for any size, grain and thread count; the elementwise ops,
// softmax and cross-entropy give bit-identical results with 1 and 3 threads; callers from several threads at once
// (the thread backend's ranks) each get their whole loop done.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/ops/elementwise.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/softmax.h"

namespace dt::kernels {
namespace {

struct Threads {
  explicit Threads(int n) : prev(intra_op_threads()) { set_intra_op_threads(n); }
  ~Threads() { set_intra_op_threads(prev); }
  int prev;
};

TEST(IntraOp, CoversEveryIndexOnce) {
  for (int t : {1, 2, 3, 5}) {
    Threads threads(t);
    for (int64_t n : {0, 1, 7, 100, 4097, 100000})
      for (int64_t grain : {1, 16, 1000, 1 << 20}) {
        std::vector<std::atomic<int>> hits(size_t(std::max<int64_t>(n, 1)));
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LE(e, n);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " grain " << grain;
      }
  }
  EXPECT_THROW(set_intra_op_threads(0), InvalidArgument);
}

TEST(IntraOp, ResultsDoNotDependOnTheThreads) {
  const Tensor a = Tensor::randn({300, 700}, 1), b = Tensor::randn({300, 700}, 2);
  const Tensor t = Tensor::rand({300}, 3, DType::i64, 0, 700);
  auto run = [&] {
    return std::vector<Tensor>{mul(a, b),
                               silu(a),
                               exp(b),
                               softmax(a, -1),
                               log_softmax(b, 0),
                               softmax_backward(b, softmax(a, -1), -1),
                               where(gt(a, b), a, b),
                               layer_norm(a, {700}).out,
                               rms_norm(b, {700}).rstd,
                               cross_entropy(a, t).loss,
                               cross_entropy_backward(Tensor::ones({}), a, t, Tensor())};
  };
  std::vector<Tensor> one, three;
  {
    Threads threads(1);
    one = run();
  }
  {
    Threads threads(3);
    three = run();
  }
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(equal(one[i], three[i])) << "result " << i;
}

TEST(IntraOp, GemmsSplitOverTheThreads) {
  // By rows of C (m >= n), by its columns (n > m), each with both operands possibly transposed, and by batch;
  // against the same GEMM on one thread.
  const Tensor a = Tensor::randn({300, 200}, 4), b = Tensor::randn({200, 170}, 5);
  const Tensor wa = Tensor::randn({90, 200}, 8), wb = Tensor::randn({200, 391}, 9);  // n > m: by columns
  const Tensor ab = Tensor::randn({6, 70, 64}, 6), bb = Tensor::randn({6, 64, 50}, 7);
  const Tensor ab2 = Tensor::randn({2, 40, 64}, 10), bb2 = Tensor::randn({2, 64, 333}, 11);     // batch < threads
  auto t = [](const Tensor& x) { return x.transpose(-2, -1).contiguous().transpose(-2, -1); };  // stored transposed
  auto run = [&] {
    return std::vector<Tensor>{matmul(a, b),
                               matmul(t(a), t(b)),
                               matmul(wa, wb),
                               matmul(t(wa), t(wb)),
                               matmul(wa, t(wb)),
                               matmul(ab, bb),
                               matmul(ab2, t(bb2)),
                               matmul(a.to(DType::f64), b.to(DType::f64)),
                               matmul(t(wa.to(DType::f64)), wb.to(DType::f64))};
  };
  std::vector<Tensor> one, three;
  {
    Threads threads(1);
    one = run();
  }
  {
    Threads threads(3);
    three = run();
  }
  for (size_t i = 0; i < one.size(); ++i) {
    Tensor d = sub(one[i].to(DType::f64), three[i].to(DType::f64));
    const double worst = amax(abs(d)).to(DType::f64).item();
    EXPECT_LE(worst, 1e-4) << "result " << i;
  }
}

TEST(IntraOp, ConcurrentCallers) {
  Threads threads(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) parallel_for(50000, 1000, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& th : callers) th.join();
  EXPECT_EQ(total.load(), 4 * 50 * 50000);
}

}  // namespace
}  // namespace dt::kernels
