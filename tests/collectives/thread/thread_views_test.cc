// Thread backend: all_gather_views / all_to_all_views on random shapes, dims, dtypes, uneven and empty blocks and
// strided layouts on both sides (tests/collectives/views_cases.h), and their errors: mismatched calls and counts,
// bad arguments, a backend with views turned off.
#include <gtest/gtest.h>

#include <atomic>

#include "tests/collectives/views_cases.h"
#include "thread_test_util.h"

namespace dt::test {
namespace {

TEST(ThreadViews, RandomCasesOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    std::atomic<int> checked{0};
    run_threads(n, [&](CommunicatorPtr comm) { checked += run_view_cases(*comm, 1000 + uint64_t(n), 60); });
    EXPECT_EQ(checked.load(), n * 61);
  }
}

TEST(ThreadViews, MismatchedCallsAreErrors) {
  // Rank 0 passes views, rank 1 contiguous buffers: both fail, naming the calls.
  run_threads(2, [&](CommunicatorPtr comm) {
    Tensor in = Tensor::ones({4, 2}), out = Tensor::zeros({4, 2});
    std::vector<kernels::StridedView> sv, rv;
    for (int q = 0; q < 2; ++q) {
      sv.push_back(kernels::view_of(in.narrow(0, 2 * q, 2)));
      rv.push_back(kernels::view_of(out.narrow(0, 2 * q, 2)));
    }
    try {
      if (comm->rank() == 0)
        comm->all_to_all_views(sv, rv, Device::cpu())->wait();
      else
        comm->all_to_allv(in.data_ptr(), {4, 4}, {0, 4}, out.data_ptr(), {4, 4}, {0, 4}, DType::f32, Device::cpu())
            ->wait();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mismatched"), std::string::npos) << e.what();
    }
  });
  // Counts that do not agree: rank 0 sends 2 rows to rank 1, which expects 3.
  run_threads(2, [&](CommunicatorPtr comm) {
    Tensor in = Tensor::ones({2, 5}), out = Tensor::zeros({5, 5});
    std::vector<kernels::StridedView> recv{kernels::view_of(out.narrow(0, 0, comm->rank() == 1 ? 3 : 2)),
                                           kernels::view_of(out.narrow(0, 3, 2))};
    try {
      comm->all_gather_views(kernels::view_of(in), recv, Device::cpu())->wait();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("counts"), std::string::npos) << e.what();
    }
  });
}

TEST(ThreadViews, BadArgumentsAndUnsupportedBackend) {
  run_threads(2, [&](CommunicatorPtr comm) {
    Tensor in = Tensor::ones({2, 3}), out = Tensor::zeros({4, 3});
    auto v = [&](const Tensor& t) { return kernels::view_of(t); };
    // One recv view for a group of two.
    EXPECT_THROW(comm->all_gather_views(v(in), {v(out)}, Device::cpu()), InvalidArgument);
    // A recv view of another dtype.
    Tensor d = Tensor::zeros({2, 3}, DType::f64);
    EXPECT_THROW(comm->all_gather_views(v(in), {v(out.narrow(0, 0, 2)), v(d)}, Device::cpu()), InvalidArgument);
    // Own block of the wrong size.
    EXPECT_THROW(comm->all_gather_views(v(in), {v(out.narrow(0, 0, 1)), v(out.narrow(0, 1, 1))}, Device::cpu()),
                 InvalidArgument);
  });
  ThreadCommOptions off;
  off.strided_views = false;
  run_threads(
      2,
      [&](CommunicatorPtr comm) {
        EXPECT_FALSE(comm->supports_views(Device::cpu()));
        Tensor in = Tensor::ones({2, 3}), out = Tensor::zeros({4, 3});
        try {
          comm->all_gather_views(kernels::view_of(in),
                                 {kernels::view_of(out.narrow(0, 0, 2)), kernels::view_of(out.narrow(0, 2, 2))},
                                 Device::cpu());
          ADD_FAILURE() << "expected an error";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
        }
      },
      off);
}

}  // namespace
}  // namespace dt::test
