// A host's NCCL communicator and CUDA stream handed to dtensor (Note [Adopted NCCL communicators], Note [Current
// streams]): collectives on an adopted communicator against the reference, the communicator still the host's after
// dtensor is done with it or failed on it, splits, and work given no stream ordered on the thread's current stream.
// One GPU, single-rank communicators; exits 77 (skipped) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <numeric>

#include "collectives/nccl/nccl_comm.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "nccl_test_util.h"

namespace dt::test {
namespace {

using namespace std::chrono_literals;

#define DT_TEST_NCCL(call)                                                 \
  do {                                                                     \
    ncclResult_t r_ = (call);                                              \
    ASSERT_EQ(r_, ncclSuccess) << #call << ": " << ncclGetErrorString(r_); \
  } while (0)

// The host's own communicator: one rank on cuda:0, made with plain NCCL (blocking, as most frameworks make them).
ncclComm_t host_comm() {
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
  return c;
}

std::vector<float> iota_floats(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(NcclAdopt, CollectivesRunOnTheHostsCommunicatorWhichStaysUsable) {
  ncclComm_t hc = host_comm();
  ASSERT_NE(hc, nullptr);
  const int64_t n = 4099;  // not a multiple of anything NCCL rounds to
  DeviceBuffer in(n * sizeof(float)), out(n * sizeof(float));
  const std::vector<float> ref = iota_floats(n, -7.f);
  in.upload(ref);
  {
    auto comm = NcclCommunicator::adopt(hc);
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->device(), Device::cuda(0));
    comm->all_reduce(in.get(), out.get(), n, DType::f32, ReduceOp::kSum, Device::cuda(0))->wait();
    EXPECT_EQ(out.download<float>(size_t(n)), ref);
    // A split is a new communicator dtensor owns; the host's is untouched by its destruction.
    auto sub = comm->split(0, 0);
    ASSERT_NE(sub, nullptr);
    sub->all_gather(in.get(), out.get(), n, DType::f32, Device::cuda(0))->wait();
    EXPECT_EQ(out.download<float>(size_t(n)), ref);
  }
  // dtensor is gone: the communicator is still the host's and works.
  DeviceBuffer twice(n * sizeof(float));
  DT_TEST_NCCL(ncclAllReduce(in.get(), twice.get(), size_t(n), ncclFloat32, ncclSum, hc, nullptr));
  DT_TEST_CUDA(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(twice.download<float>(size_t(n)), ref);
  DT_TEST_NCCL(ncclCommDestroy(hc));
}

TEST(NcclAdopt, ATimeoutFailsDtensorsCallsButLeavesTheCommunicatorToItsOwner) {
  ncclComm_t hc = host_comm();
  cudaStream_t s;
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer buf(256 * sizeof(float));
  buf.upload(std::vector<float>(256, 3.f));
  {
    NcclAdoptOptions opts;
    opts.timeout = 300ms;
    auto comm = NcclCommunicator::adopt(hc, opts);
    StreamBlocker block(s);  // the call waits for the caller's stream, past the timeout
    WorkPtr w = comm->all_reduce(buf.get(), buf.get(), 256, DType::f32, ReduceOp::kSum, Device::cuda(0), Stream{s});
    try {
      w->wait(10s);  // the watchdog's 0.3 s deadline fails it first
      ADD_FAILURE() << "expected a TimeoutError";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("must abort it"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(comm->aborted());
    block.release();
  }
  DT_TEST_CUDA(cudaStreamSynchronize(s));
  // Not aborted by dtensor: the handle is valid and the owner decides (here: a clean destroy).
  ncclResult_t state = ncclInternalError;
  DT_TEST_NCCL(ncclCommGetAsyncError(hc, &state));
  EXPECT_EQ(state, ncclSuccess);
  DT_TEST_NCCL(ncclCommDestroy(hc));
  DT_TEST_CUDA(cudaStreamDestroy(s));
}

TEST(NcclAdopt, BadArgumentsAreRejected) {
  EXPECT_THROW(NcclCommunicator::adopt(nullptr), InvalidArgument);
  ncclComm_t hc = host_comm();
  NcclAdoptOptions opts;
  opts.global_ranks = {0, 1};  // two ranks named for a communicator of one
  EXPECT_THROW(NcclCommunicator::adopt(hc, opts), InvalidArgument);
  opts.global_ranks = {};
  opts.timeout = 0ms;
  EXPECT_THROW(NcclCommunicator::adopt(hc, opts), InvalidArgument);
  DT_TEST_NCCL(ncclCommDestroy(hc));
}

// Work given no stream goes to the thread's current stream: a collective and a Tensor copy queued while the current
// stream is blocked wait for it; switching streams orders the new one after the old.
TEST(CurrentStream, WorkWithoutAStreamIsOrderedOnTheThreadsCurrentStream) {
  auto comm = make_single_rank();
  const Device gpu = Device::cuda(0);
  cudaStream_t s1, s2;
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const int64_t n = 1 << 16;
  DeviceBuffer in(n * sizeof(int32_t)), out(n * sizeof(int32_t));
  DT_TEST_CUDA(cudaMemset(in.get(), 0, n * sizeof(int32_t)));
  EXPECT_EQ(current_stream(gpu).handle, nullptr);
  {
    StreamGuard guard(gpu, Stream{s1});
    EXPECT_EQ(current_stream(gpu).handle, s1);
    StreamBlocker block(s1);
    DT_TEST_CUDA(cudaMemsetAsync(in.get(), 0x01, n * sizeof(int32_t), s1));
    WorkPtr w = comm->all_reduce(in.get(), out.get(), n, DType::i32, ReduceOp::kSum, gpu);  // no stream given
    // A switch: s2 waits for s1's work (the blocked fill), so a copy queued on s2 waits too.
    set_current_stream(gpu, Stream{s2});
    Tensor t = Tensor::full(Shape{8}, 5.0, DType::f32, gpu);  // the fill runs on s2, behind s1
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(w->is_completed());
    EXPECT_EQ(cudaStreamQuery(s2), cudaErrorNotReady);
    cudaGetLastError();
    block.release();
    w->wait();
    EXPECT_EQ(t.to(Device::cpu()).to_vector(), std::vector<double>(8, 5.0));
  }
  EXPECT_EQ(current_stream(gpu).handle, nullptr);  // the guard restored the legacy default stream
  auto got = out.download<int32_t>(size_t(n));
  EXPECT_EQ(std::count(got.begin(), got.end(), 0x01010101), n);
  DT_TEST_CUDA(cudaDeviceSynchronize());
  DT_TEST_CUDA(cudaStreamDestroy(s1));
  DT_TEST_CUDA(cudaStreamDestroy(s2));
}

}  // namespace
}  // namespace dt::test
