// The NCCL watchdog: an operation that runs past the communicator's timeout fails with a TimeoutError and the
// communicator is aborted. A binary of its own: after the abort, the NCCL kernel that was queued behind the blocked
// stream still runs on an aborted communicator, which must not disturb the other tests.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "nccl_test_util.h"

namespace dt::test {
namespace {

using namespace std::chrono_literals;

TEST(NcclWatchdog, AnOperationPastTheTimeoutAbortsTheCommunicator) {
  NcclOptions opts;
  opts.timeout = 300ms;
  opts.key = "watchdog-test";
  auto comm = make_single_rank(opts);
  cudaStream_t s;
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer buf(256 * sizeof(float));
  {
    StreamBlocker block(s);
    WorkPtr w = comm->all_reduce(buf.get(), buf.get(), 256, DType::f32, ReduceOp::kSum, Device::cuda(0), Stream{s});
    const auto t0 = std::chrono::steady_clock::now();
    try {
      w->wait(10s);
      ADD_FAILURE() << "expected the watchdog to fail the call";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("watchdog"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_TRUE(comm->aborted());
    // Later calls fail at once with the reason.
    try {
      comm->barrier()->wait();
      ADD_FAILURE() << "expected a RemoteError";
    } catch (const RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("did not complete within 0.3 s"), std::string::npos) << e.what();
    }
    block.release();
  }
  comm.reset();
  cudaStreamSynchronize(s);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace dt::test
