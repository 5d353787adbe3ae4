// DTensor on CUDA tensors, checked against the CPU: DeviceMesh, distribute_tensor, every redistribution transition
// (the matrix of tests/dtensor/redistribute_cases.h), full_tensor and a few ops. One world per test suite, chosen
// with --gtest_filter (tests/gpu/run.sh does), always under dtrun:
//   DTensorCudaNccl.*  init_process_group(kCUDA): NCCL, one process per GPU (one rank on a one-GPU machine)
//   DTensorCudaUcx.*   init_process_group(kCPU): UCX, CUDA tensors staged through pinned host memory; 2-4
//                      processes may share one GPU
// Exits 77 (skipped) without a usable GPU (tests/gpu_test_main.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/process_group.h"
#include "core/cuda_check.h"
#include "core/stream.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/softmax.h"
#include "tests/dtensor/redistribute_cases.h"
#include "tests/gpu_test_main.h"

namespace dt {
namespace {

CommunicatorPtr nccl_world() {
  return test::shared_until_tests_end([] { return init_process_group(DeviceType::kCUDA); });
}

CommunicatorPtr ucx_world() {
  return test::shared_until_tests_end([] { return init_process_group(DeviceType::kCPU); });
}

// The GPU of this rank: the NCCL communicator's own, or device 0 that the UCX ranks share.
Device gpu_of(const CommunicatorPtr& world) {
  return world->home_device().is_cuda() ? world->home_device() : Device::cuda(0);
}

void check_mesh(const CommunicatorPtr& world) {
  const Device gpu = gpu_of(world);
  const int64_t n = world->size();
  DeviceMesh mesh = DeviceMesh::create(world, gpu, {n}, {"x"});
  EXPECT_EQ(mesh.device(), gpu);
  EXPECT_EQ(mesh.size(), n);
  EXPECT_TRUE(mesh.is_member());
  EXPECT_EQ(mesh.global_rank(), world->rank());
  EXPECT_TRUE(mesh.comm(0)->supports(gpu));
  if (n % 2 == 0) {
    DeviceMesh m2 = DeviceMesh::create(world, gpu, {2, n / 2}, {"dp", "tp"});
    EXPECT_EQ(m2["tp"].size(), n / 2);
    EXPECT_EQ(m2["dp"].device(), gpu);
  }
}

void check_redistribution_matrix(const CommunicatorPtr& world) {
  const int64_t n = world->size();
  testing::MatrixOptions o;
  o.device = gpu_of(world);
  o.meshes = {{n}};
  if (n == 1) o.meshes.push_back({1, 1});
  if (n == 4) o.meshes.push_back({2, 2});
  o.shapes = {{8, 4}, {7, 5}, {3, 2}};  // even; uneven; an empty shard on 4 ranks
  o.dtypes = {DType::f32, DType::bf16};
  o.all_partial_ops = false;
  testing::MatrixResult r = testing::run_redistribution_matrix(world, o);
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_GT(r.cases, 50);
  if (world->rank() == 0)
    std::printf("%lld redistributions on %s checked against the CPU on %lld rank(s), %lld unsupported rejected\n",
                (long long)r.cases, o.device.to_string().c_str(), (long long)n, (long long)r.unsupported);
}

// Every rank builds the same random inputs on the CPU; the ops run on sharded CUDA DTensors and their full results
// must match the CPU kernels on the full tensors.
void check_ops(const CommunicatorPtr& world) {
  const Device gpu = gpu_of(world);
  DeviceMesh mesh = DeviceMesh::create(world, gpu, {world->size()});
  const Tensor a = Tensor::rand({13, 6}, 11, DType::f32, -2, 2), b = Tensor::rand({6, 5}, 12, DType::f32, -2, 2);
  const Tensor c = Tensor::rand({13, 6}, 13, DType::f32, -2, 2);
  auto close = [](const DTensor& got, const Tensor& want, const char* what) {
    Tensor g = got.full_tensor().to(Device::cpu());
    EXPECT_EQ(got.to_local().device(), got.device()) << what;
    EXPECT_TRUE(allclose(g, want, 1e-4, 1e-5)) << what << ": got " << g << "\nwant " << want;
  };
  DTensor da = distribute_tensor(a.to(gpu), mesh, {Shard{0}});
  DTensor db = distribute_tensor(b.to(gpu), mesh, {Replicate{}});
  DTensor dc = distribute_tensor(c.to(gpu), mesh, {Shard{1}});
  close(matmul(da, db), kernels::matmul(a, b), "matmul S(0) @ R");
  close(add(da, dc), kernels::add(a, c), "add S(0) + S(1)");
  close(sum(da, {0}), kernels::sum(a, {0}), "sum over the sharded dim");
  close(softmax(dc, 1), kernels::softmax(c, 1), "softmax over the sharded dim");
}

void CUDART_CB hold_until_released(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
}

// Work::wait_stream on NCCL: the caller's stream is held by a host function, so the collective (ordered after it)
// cannot have run; wait_stream must return anyway (the host is not blocked), and a copy queued on another stream
// after it must read the collective's result. Checked against the sum computed on the CPU.
void check_wait_stream(const CommunicatorPtr& world) {
  const Device gpu = gpu_of(world);
  DeviceGuard guard(gpu);
  const int64_t n = world->size(), count = 1 << 16;
  const Tensor input = Tensor::rand({count}, 100 + uint64_t(world->rank()), DType::f32, -1, 1);
  Tensor want = Tensor::zeros({count}, DType::f32);
  for (int64_t r = 0; r < n; ++r)
    want = kernels::add(want, Tensor::rand({count}, 100 + uint64_t(r), DType::f32, -1, 1));
  Tensor buf = input.to(gpu), out = Tensor::zeros({count}, DType::f32, gpu);
  synchronize(gpu);  // made on the default stream; the streams below do not wait for it
  Stream caller = create_stream(gpu), consumer = create_stream(gpu);
  std::atomic<bool> released{false};
  Event copied;
  {
    struct Release {
      std::atomic<bool>& flag;
      ~Release() { flag.store(true); }
    } release{released};
    DT_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(caller.handle), hold_until_released, &released));
    WorkPtr w = world->all_reduce(buf.data<float>(), buf.data<float>(), count, DType::f32, ReduceOp::kSum, gpu, caller);
    w->wait_stream(consumer, gpu);  // returns while the collective is held back
    EXPECT_FALSE(w->is_completed());
    DT_CUDA_CHECK(cudaMemcpyAsync(out.data<float>(), buf.data<float>(), size_t(count) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(consumer.handle)));
    copied = Event::record(gpu, consumer);
    EXPECT_FALSE(copied.query());
  }
  copied.synchronize();
  EXPECT_TRUE(allclose(out.to(Device::cpu()), want, 1e-5, 1e-6));
  synchronize(gpu, caller);
  destroy_stream(gpu, caller);
  destroy_stream(gpu, consumer);
}

TEST(DTensorCudaNccl, Mesh) { check_mesh(nccl_world()); }
TEST(DTensorCudaNccl, WaitStreamDoesNotBlockTheHost) { check_wait_stream(nccl_world()); }
TEST(DTensorCudaNccl, EveryRedistribution) { check_redistribution_matrix(nccl_world()); }
TEST(DTensorCudaNccl, Ops) { check_ops(nccl_world()); }

TEST(DTensorCudaUcx, Mesh) { check_mesh(ucx_world()); }
TEST(DTensorCudaUcx, EveryRedistribution) { check_redistribution_matrix(ucx_world()); }
TEST(DTensorCudaUcx, Ops) { check_ops(ucx_world()); }

}  // namespace
}  // namespace dt
