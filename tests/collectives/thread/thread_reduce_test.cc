// all_reduce and reduce_scatter on the thread backend: every dtype x reduce op x size x in-place, on 1-4 ranks,
// against a reference folded in rank order from every rank's inputs.
#include <gtest/gtest.h>

#include "thread_test_util.h"

namespace dt::test {
namespace {

class ThreadReduce : public ::testing::TestWithParam<int> {};

template <typename T>
CaseDriver all_reduce_case(int64_t count, ReduceOp op, bool in_place, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("all_reduce(count=", count, ", ", dtype_name(dtype_of<T>), ", ", reduce_op_name(op),
                   in_place ? ", in place)" : ")");
  c.prepare = [=](Shared& sh, int n) {
    for (int r = 0; r < n; ++r) {
      Shared::size_as<T>(sh.in[size_t(r)], count);
      T* x = sh.in_at<T>(r);
      for (int64_t i = 0; i < count; ++i) x[i] = gen<T>(seed + uint64_t(r), i, op);
    }
    Shared::size_as<T>(sh.expect[0], count);
    T* e = sh.expect_at<T>(0);
    for (int64_t i = 0; i < count; ++i) {
      T acc = sh.in_at<T>(0)[i];
      for (int r = 1; r < n; ++r) acc = ref_combine(op, acc, sh.in_at<T>(r)[i]);
      e[i] = op == ReduceOp::kAvg ? ref_avg(acc, n) : acc;
    }
  };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    const int r = comm.rank();
    HostBuf<T> in(sh.in_at<T>(r), sh.in_at<T>(r) + count);
    HostBuf<T> out(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out[size_t(i)] = gen<T>(seed + 1000, i);  // junk to overwrite
    T* result = in_place ? in.data() : out.data();
    comm.all_reduce(in.data(), result, count, dtype_of<T>, op, Device::cpu())->wait();
    std::string err = compare(result, sh.expect_at<T>(0), count, "result");
    if (err.empty() && !in_place) err = compare(in.data(), sh.in_at<T>(r), count, "input (must be unchanged)");
    return err;
  };
  return c;
}

template <typename T>
CaseDriver reduce_scatter_case(int64_t count, ReduceOp op, bool in_place, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("reduce_scatter(count=", count, ", ", dtype_name(dtype_of<T>), ", ", reduce_op_name(op),
                   in_place ? ", in place)" : ")");
  c.prepare = [=](Shared& sh, int n) {
    const int64_t total = count * n;
    for (int r = 0; r < n; ++r) {
      Shared::size_as<T>(sh.in[size_t(r)], total);
      T* x = sh.in_at<T>(r);
      for (int64_t i = 0; i < total; ++i) x[i] = gen<T>(seed + uint64_t(r), i, op);
    }
    for (int r = 0; r < n; ++r) {
      Shared::size_as<T>(sh.expect[size_t(r)], count);
      T* e = sh.expect_at<T>(r);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t k = r * count + i;
        T acc = sh.in_at<T>(0)[k];
        for (int j = 1; j < n; ++j) acc = ref_combine(op, acc, sh.in_at<T>(j)[k]);
        e[i] = op == ReduceOp::kAvg ? ref_avg(acc, n) : acc;
      }
    }
  };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    const int r = comm.rank(), n = comm.size();
    const int64_t total = count * n;
    HostBuf<T> in(sh.in_at<T>(r), sh.in_at<T>(r) + total);
    HostBuf<T> out(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out[size_t(i)] = gen<T>(seed + 1000, i);
    T* result = in_place ? in.data() + r * count : out.data();
    comm.reduce_scatter(in.data(), result, count, dtype_of<T>, op, Device::cpu())->wait();
    std::string err = compare(result, sh.expect_at<T>(r), count, "result");
    if (err.empty() && !in_place) err = compare(in.data(), sh.in_at<T>(r), total, "input (must be unchanged)");
    if (err.empty() && in_place) {
      // The other blocks of the in-place buffer are not part of the result, but they must not be corrupted.
      for (int j = 0; j < n && err.empty(); ++j)
        if (j != r) err = compare(in.data() + j * count, sh.in_at<T>(r) + j * count, count, "untouched block");
    }
    return err;
  };
  return c;
}

std::vector<CaseDriver> cases(bool scatter, int n) {
  std::vector<CaseDriver> out;
  uint64_t seed = 1;
  for (DType dt : reduce_dtypes())
    for (ReduceOp op : reduce_ops())
      for (int64_t size : test_sizes()) {
        // The 8-bit types are extra coverage: small sizes only.
        if (dtype_size(dt) == 1 && size > 37) continue;
        // reduce_scatter's large case keeps each rank's input near `size` elements (blocks of ceil(size / n)).
        const int64_t count = scatter && size > 1000 ? (size + n - 1) / n : size;
        for (bool in_place : {false, true}) {
          dispatch_dtype(dt, [&]<typename T>() {
            if constexpr (!std::is_same_v<T, bool>)
              out.push_back(scatter ? reduce_scatter_case<T>(count, op, in_place, seed)
                                    : all_reduce_case<T>(count, op, in_place, seed));
          });
          seed += 17;
        }
      }
  return out;
}

TEST_P(ThreadReduce, AllReduce) { run_cases(GetParam(), cases(false, GetParam())); }

TEST_P(ThreadReduce, ReduceScatter) { run_cases(GetParam(), cases(true, GetParam())); }

// The Tensor API funnels into the same calls.
TEST_P(ThreadReduce, TensorApi) {
  const int n = GetParam();
  run_threads(n, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    Tensor t = Tensor::from_vector({double(r + 1), double(2 * r), -double(r)}, {3}, DType::f32);
    comm->all_reduce(t, ReduceOp::kSum)->wait();
    const double s = n * (n + 1) / 2.0, s2 = n * (n - 1.0);
    EXPECT_EQ(t.to_vector(), (std::vector<double>{s, s2, -s2 / 2}));

    Tensor in = Tensor::arange(2 * n, DType::i64);
    Tensor out = Tensor::empty({2}, DType::i64);
    comm->reduce_scatter(in, out, ReduceOp::kMax)->wait();
    EXPECT_EQ(out.to_vector(), (std::vector<double>{2.0 * r, 2.0 * r + 1}));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadReduce, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param); });

}  // namespace
}  // namespace dt::test
