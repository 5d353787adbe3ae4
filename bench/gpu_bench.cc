// Device benchmarks, run by tests/gpu/run.sh after the GPU checks (nothing is asserted on time). One JSON line a
// row:
//   kernels against a device-to-device cudaMemcpy of the same bytes (the bandwidth ceiling of a copy),
//   collectives of a one-rank NCCL communicator against the same raw NCCL call on a communicator of its own.
// Exits 77 without a usable GPU.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "collectives/nccl/nccl_comm.h"
#include "core/device.h"
#include "core/tensor.h"
#include "kernels/cast.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"
#include "tools/args.h"

namespace {

using dt::Device;
using dt::DType;
using dt::Stream;
using dt::Tensor;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median-free and simple: warm up, then the mean over `iters` back-to-back runs timed with events on `s`.
double time_us(cudaStream_t s, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaStreamSynchronize(s), "warm-up");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventRecord(a, s), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) fn();
  check(cudaEventRecord(b, s), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 1000.0 * ms / iters;
}

// Host wall time (for calls that wait on the host, as a user of Work::wait does).
double wall_us(int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

void row(const char* bench, const std::string& op, size_t bytes, double us, double ref_us, const char* ref) {
  // Bandwidth as bytes read + written for kernels (2 x bytes), algorithm bytes for collectives.
  const double moved = std::string(bench) == "gpu_kernels" ? 2.0 * double(bytes) : double(bytes);
  std::printf(
      "{\"bench\":\"%s\",\"op\":\"%s\",\"bytes\":%zu,\"us\":%.2f,\"GBps\":%.1f,\"ref\":\"%s\",\"ref_us\":%.2f,"
      "\"ref_GBps\":%.1f,\"ratio\":%.3f}\n",
      bench, op.c_str(), bytes, us, moved / us / 1e3, ref, ref_us, moved / ref_us / 1e3, us / ref_us);
  std::fflush(stdout);
}

void kernels_bench(cudaStream_t s) {
  const Device gpu = Device::cuda(0);
  const Stream st{s};
  for (int64_t n : {int64_t(1) << 20, int64_t(1) << 24}) {  // 4 MiB and 64 MiB of f32
    const size_t bytes = size_t(n) * 4;
    Tensor src = Tensor::rand({n}, 1, DType::f32).to(gpu), dst = Tensor::empty({n}, DType::f32, gpu);
    check(cudaDeviceSynchronize(), "inputs");
    const double d2d = time_us(s, 20, [&] {
      check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
    });
    row("gpu_kernels", "copy_contiguous", bytes, time_us(s, 20, [&] { dt::kernels::copy(dst, src, st); }), d2d,
        "d2d_memcpy");
    const int64_t side = int64_t(1) << (n == (int64_t(1) << 20) ? 10 : 12);
    Tensor sq = src.view({side, side}), out = dst.view({side, side});
    row("gpu_kernels", "copy_transposed", bytes, time_us(s, 20, [&] { dt::kernels::copy(out, sq.t(), st); }), d2d,
        "d2d_memcpy");
    Tensor half = Tensor::empty({n}, DType::bf16, gpu);
    row("gpu_kernels", "cast_f32_bf16", bytes,
        time_us(s, 20,
                [&] { dt::kernels::cast(half.data_ptr(), DType::bf16, src.data_ptr(), DType::f32, n, gpu, st); }),
        d2d, "d2d_memcpy");
    row("gpu_kernels", "reduce_sum_f32", bytes,
        time_us(s, 20,
                [&] {
                  dt::kernels::reduce(dst.data_ptr(), src.data_ptr(), dst.data_ptr(), n, DType::f32, dt::ReduceOp::kSum,
                                      gpu, st);
                }),
        d2d, "d2d_memcpy");
  }
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, ncclGetErrorString(r));
    std::exit(1);
  }
}

void collectives_bench(cudaStream_t s) {
  const Device gpu = Device::cuda(0);
  auto comm = dt::NcclCommunicator::create(
      0, 1, gpu, [](const std::string&, const std::optional<std::string>& v) { return v.value_or(""); });
  ncclComm_t raw = nullptr;
  int dev = 0;
  nccl_check(ncclCommInitAll(&raw, 1, &dev), "ncclCommInitAll");
  for (int64_t n : {int64_t(1) << 8, int64_t(1) << 18, int64_t(1) << 24}) {  // 1 KiB, 1 MiB, 64 MiB of f32
    const size_t bytes = size_t(n) * 4;
    Tensor a = Tensor::rand({n}, 2, DType::f32).to(gpu), b = Tensor::empty({n}, DType::f32, gpu);
    check(cudaDeviceSynchronize(), "inputs");
    auto ours = [&](const std::function<dt::WorkPtr()>& call) { return wall_us(20, [&] { call()->wait(); }); };
    auto theirs = [&](const std::function<ncclResult_t()>& call) {
      return wall_us(20, [&] {
        nccl_check(call(), "raw nccl");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      });
    };
    row("gpu_collectives", "all_reduce", bytes, ours([&] {
          return comm->all_reduce(a.data_ptr(), b.data_ptr(), n, DType::f32, dt::ReduceOp::kSum, gpu, Stream{s});
        }),
        theirs([&] { return ncclAllReduce(a.data_ptr(), b.data_ptr(), size_t(n), ncclFloat32, ncclSum, raw, s); }),
        "raw_nccl");
    row("gpu_collectives", "all_gather", bytes,
        ours([&] { return comm->all_gather(a.data_ptr(), b.data_ptr(), n, DType::f32, gpu, Stream{s}); }),
        theirs([&] { return ncclAllGather(a.data_ptr(), b.data_ptr(), size_t(n), ncclFloat32, raw, s); }), "raw_nccl");
    row("gpu_collectives", "reduce_scatter", bytes, ours([&] {
          return comm->reduce_scatter(a.data_ptr(), b.data_ptr(), n, DType::f32, dt::ReduceOp::kSum, gpu, Stream{s});
        }),
        theirs([&] { return ncclReduceScatter(a.data_ptr(), b.data_ptr(), size_t(n), ncclFloat32, ncclSum, raw, s); }),
        "raw_nccl");
  }
  ncclCommDestroy(raw);
}

constexpr const char* kUsage =
    "usage: bench/gpu_bench   (no arguments: kernels against cudaMemcpy, collectives against raw NCCL, on GPU 0)\n";

}  // namespace

int main(int argc, char** argv) {
  dt::tools::read_operands("gpu_bench", argc, argv, kUsage);
  if (!dt::cuda_available()) {
    std::printf("SKIPPED: no usable CUDA device in this process\n");
    return 77;
  }
  try {
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    kernels_bench(s);
    collectives_bench(s);
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
