// NCCL backend on one GPU (single-rank communicators: NCCL refuses two ranks of one communicator on one GPU):
// every op x dtype x size x in-place against the CPU reference (the thread backend on host copies), stream order,
// the Tensor API, splits, abort and Work timeouts. Exits 77 (skipped) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "collectives/nccl/nccl_comm.h"
#include "collectives/thread/thread_comm.h"
#include "nccl_test_util.h"
#include "tests/collectives/thread/thread_test_util.h"

namespace dt::test {
namespace {

using namespace std::chrono_literals;

class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    comm_ = make_single_rank();
    host_ = make_thread_world(1)[0];
  }
  static void TearDownTestSuite() {
    comm_.reset();
    host_.reset();
  }
  static std::shared_ptr<NcclCommunicator> comm_;
  static CommunicatorPtr host_;
};
std::shared_ptr<NcclCommunicator> Nccl::comm_;
CommunicatorPtr Nccl::host_;

// Runs one call on the host reference and on the GPU from the same inputs; returns "" or the first difference.
template <typename T>
std::string run_both(Communicator& host, Communicator& dev, CollectiveKind kind, int64_t count, ReduceOp op,
                     bool in_place, uint64_t seed) {
  // One rank: every layout is `count` elements, except all_to_allv which uses gaps (send displ 2, recv displ 1).
  const bool v = kind == CollectiveKind::kAllToAllV;
  const int64_t send_size = v ? count + 2 : count, recv_size = v ? count + 1 : count;
  HostBuf<T> a(static_cast<size_t>(send_size)), b(static_cast<size_t>(recv_size));
  for (int64_t i = 0; i < send_size; ++i) a[size_t(i)] = gen<T>(seed, i, op);
  for (int64_t i = 0; i < recv_size; ++i) b[size_t(i)] = gen<T>(seed + 99, i);

  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.dtype = dtype_of<T>;
  args.op = op;
  if (v) {
    args.send_counts = {count};
    args.send_displs = {2};
    args.recv_counts = {count};
    args.recv_displs = {1};
  }
  in_place = in_place || kind == CollectiveKind::kBroadcast;

  HostBuf<T> ha = a, hb = b;
  CollectiveArgs h = args;
  h.send = ha.data();
  h.recv = in_place ? ha.data() : hb.data();
  h.device = Device::cpu();
  host.submit(h)->wait();

  DeviceBuffer da(a.size() * sizeof(T)), db(b.size() * sizeof(T));
  da.upload(a);
  db.upload(b);
  CollectiveArgs d = args;
  d.send = da.get();
  d.recv = in_place ? da.get() : db.get();
  d.device = Device::cuda(0);
  dev.submit(d)->wait();

  const HostBuf<T>& want = in_place ? ha : hb;
  auto got = in_place ? da.download<T>(a.size()) : db.download<T>(b.size());
  std::string err = compare(got.data(), want.data(), int64_t(want.size()), "result");
  if (err.empty() && !in_place) err = compare(da.download<T>(a.size()).data(), a.data(), send_size, "send buffer");
  return err;
}

TEST_F(Nccl, EveryOpDtypeAndSizeMatchesTheCpuReference) {
  const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32,
                                     DType::i64, DType::i8,   DType::u8,  DType::b8};
  uint64_t seed = 1;
  for (DType dt : dtypes)
    for (int64_t count : test_sizes())
      dispatch_dtype(dt, [&]<typename T>() {
        auto check = [&](CollectiveKind kind, ReduceOp op, bool in_place) {
          std::string err = run_both<T>(*host_, *comm_, kind, count, op, in_place, seed++);
          EXPECT_EQ(err, "") << collective_kind_name(kind) << "(count=" << count << ", " << dtype_name(dt) << ", "
                             << reduce_op_name(op) << (in_place ? ", in place" : "") << ")";
        };
        for (bool in_place : {false, true}) {
          for (ReduceOp op : reduce_ops()) {
            check(CollectiveKind::kAllReduce, op, in_place);
            check(CollectiveKind::kReduceScatter, op, in_place);
          }
          check(CollectiveKind::kAllGather, ReduceOp::kSum, in_place);
          check(CollectiveKind::kAllToAll, ReduceOp::kSum, in_place);
        }
        check(CollectiveKind::kBroadcast, ReduceOp::kSum, true);
        check(CollectiveKind::kAllToAllV, ReduceOp::kSum, false);
      });
}

TEST_F(Nccl, CallsAreOrderedAfterTheCallersStream) {
  cudaStream_t s;
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t n = 1 << 20;
  DeviceBuffer in(n * sizeof(int32_t)), out(n * sizeof(int32_t));
  DT_TEST_CUDA(cudaMemset(in.get(), 0, n * sizeof(int32_t)));
  {
    // The fill is queued behind a blocked host function: the all_reduce must wait for it, not read zeros.
    StreamBlocker block(s);
    DT_TEST_CUDA(cudaMemsetAsync(in.get(), 0x01, n * sizeof(int32_t), s));
    WorkPtr w = comm_->all_reduce(in.get(), out.get(), n, DType::i32, ReduceOp::kSum, Device::cuda(0), Stream{s});
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(w->is_completed());
    block.release();
    w->wait();
  }
  auto got = out.download<int32_t>(size_t(n));
  EXPECT_EQ(std::count(got.begin(), got.end(), 0x01010101), n);
  DT_TEST_CUDA(cudaStreamDestroy(s));
}

TEST_F(Nccl, WaitTimeoutLeavesTheCallPendingAndItCompletesLater) {
  cudaStream_t s;
  DT_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceBuffer buf(1024 * sizeof(float));
  buf.upload(std::vector<float>(1024, 2.f));
  WorkPtr w;
  {
    StreamBlocker block(s);
    w = comm_->all_reduce(buf.get(), buf.get(), 1024, DType::f32, ReduceOp::kMax, Device::cuda(0), Stream{s});
    try {
      w->wait(30ms);
      ADD_FAILURE() << "expected a timeout";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(w->is_completed());
  }  // releases the stream
  w->wait();
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(w->error(), nullptr);
  EXPECT_EQ(buf.download<float>(1024), std::vector<float>(1024, 2.f));
  EXPECT_FALSE(comm_->aborted());
  DT_TEST_CUDA(cudaStreamSynchronize(s));
  DT_TEST_CUDA(cudaStreamDestroy(s));
}

TEST_F(Nccl, TensorApi) {
  Tensor t = Tensor::full({5}, 3.0, DType::f32, Device::cuda(0));
  comm_->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_EQ(t.to(Device::cpu()).to_vector(), std::vector<double>(5, 3.0));
  Tensor in = Tensor::arange(6, DType::i64).to(Device::cuda(0));
  Tensor out = Tensor::empty({6}, DType::i64, Device::cuda(0));
  comm_->all_gather(in, out)->wait();
  EXPECT_EQ(out.to(Device::cpu()).to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  comm_->barrier()->wait();
}

TEST_F(Nccl, DevicesAreCheckedAtTheEntry) {
  EXPECT_EQ(comm_->backend_name(), "nccl");
  EXPECT_TRUE(comm_->supports(Device::cuda(0)));
  EXPECT_FALSE(comm_->supports(Device::cpu()));
  float x = 0;
  EXPECT_THROW(comm_->all_reduce(&x, &x, 1, DType::f32, ReduceOp::kSum, Device::cpu()), InvalidArgument);
  EXPECT_EQ(comm_->global_ranks(), std::vector<int>{0});
}

TEST_F(Nccl, Split) {
  auto sub = comm_->split(0, 7);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->global_ranks(), std::vector<int>{0});
  DeviceBuffer buf(4 * sizeof(double));
  buf.upload(std::vector<double>{1, 2, 3, 4});
  sub->all_reduce(buf.get(), buf.get(), 4, DType::f64, ReduceOp::kProduct, Device::cuda(0))->wait();
  EXPECT_EQ(buf.download<double>(4), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(comm_->split(-1, 0), nullptr);
  comm_->barrier()->wait();  // the parent still works
}

TEST(NcclAbort, AbortFailsLaterCallsWithTheReason) {
  NcclOptions opts;
  opts.key = "abort-test";
  auto comm = make_single_rank(opts);
  DeviceBuffer buf(16 * sizeof(float));
  comm->all_reduce(buf.get(), buf.get(), 16, DType::f32, ReduceOp::kSum, Device::cuda(0))->wait();
  EXPECT_FALSE(comm->aborted());
  comm->abort("test abort");
  comm->abort("second reason is ignored");
  EXPECT_TRUE(comm->aborted());
  WorkPtr w = comm->all_reduce(buf.get(), buf.get(), 16, DType::f32, ReduceOp::kSum, Device::cuda(0));
  try {
    w->wait();
    ADD_FAILURE() << "expected a RemoteError";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->split(0, 0), InvalidArgument);
  comm.reset();  // destroying an aborted communicator is fine
}

TEST(NcclCreate, BadArgumentsAreRejected) {
  auto ex = [](const std::string&, const std::optional<std::string>& v) { return v.value_or(""); };
  EXPECT_THROW(NcclCommunicator::create(0, 1, Device::cpu(), ex), InvalidArgument);
  EXPECT_THROW(NcclCommunicator::create(2, 2, Device::cuda(0), ex), InvalidArgument);
  // A non-root rank that reads a malformed id.
  EXPECT_THROW(NcclCommunicator::create(1, 2, Device::cuda(0), ex), InvalidArgument);
}

}  // namespace
}  // namespace dt::test
