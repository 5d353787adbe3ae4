// Every CUDA kernel against the CPU reference on random data, on an explicit non-default stream. Linked with the
// GPU test main: without a usable GPU the binary exits 77 (meson: skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/cast.h"
#include "kernels/chunk_cat.h"
#include "kernels/copy.h"
#include "kernels/fill.h"
#include "kernels/reduce.h"
#include "tests/kernels/test_util.h"

namespace dt::kernels {
namespace {

using namespace dt::kernels::testing;

const Device kGpu = Device::cuda(0);

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&raw_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), cudaSuccess);
    stream_ = Stream{raw_};
  }
  void TearDown() override {
    cudaEventDestroy(inputs_ready_);
    cudaStreamDestroy(raw_);
  }
  void sync() { synchronize(kGpu, stream_); }
  // The stream for the next launch, ordered after everything queued so far on the legacy default stream, where
  // Tensor::to and the tensor factories make the inputs: a non-blocking stream does not wait for it by itself, and
  // a host-to-device cudaMemcpy may return before its DMA finished.
  Stream after_inputs() {
    EXPECT_EQ(cudaEventRecord(inputs_ready_, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(raw_, inputs_ready_, 0), cudaSuccess);
    return stream_;
  }

  cudaStream_t raw_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  Stream stream_;
};

// Same bytes (NaN payloads may differ between CPU and GPU only where conversions create NaNs).
void expect_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  Tensor g = gpu.to(Device::cpu()).contiguous(), c = cpu.contiguous();
  ASSERT_EQ(g.shape(), c.shape()) << what;
  size_t es = g.element_size();
  for (int64_t i = 0; i < g.numel(); ++i) {
    uint64_t a = load_bits(static_cast<char*>(g.data_ptr()) + i * int64_t(es), es);
    uint64_t b = load_bits(static_cast<char*>(c.data_ptr()) + i * int64_t(es), es);
    ASSERT_TRUE(same_value(a, b, g.dtype())) << what << " element " << i << ": 0x" << std::hex << a << " vs 0x" << b;
  }
}

Tensor random_bits_tensor(const Shape& shape, DType t, uint64_t seed) {
  Tensor x = Tensor::empty(shape, t);
  fill_random_bits(x, seed);
  return x;
}

// Source data for a cast that stays in the defined range (see cast_test.cc): random bits for float -> float and
// integer sources, bounded values for float -> integer.
Tensor cast_source(const Shape& shape, DType s, DType d, uint64_t seed) {
  if (!is_floating(s) && s != DType::i64) return random_bits_tensor(shape, s, seed);
  if (s == DType::i64) return random_values(shape, s, seed, -1e15, 1e15);
  if (is_floating(d)) return random_bits_tensor(shape, s, seed);
  double lim = s == DType::f16 ? 60000 : 1e9;
  if (d == DType::u8) return random_values(shape, s, seed, 0, 255.9);
  if (d == DType::i8) return random_values(shape, s, seed, -128.9, 127.9);
  return random_values(shape, s, seed, -lim, lim);
}

TEST_F(CudaKernels, ReduceEveryDtypeAndOp) {
  uint64_t seed = 1;
  for (DType t : all_dtypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
      for (int64_t n : {1, 37, 100003}) {
        Tensor a = is_floating(t) ? random_values({n}, t, seed++, -4, 4) : random_bits_tensor({n}, t, seed++);
        Tensor b = is_floating(t) ? random_values({n}, t, seed++, -4, 4) : random_bits_tensor({n}, t, seed++);
        Tensor want = Tensor::empty({n}, t);
        reduce(want.data_ptr(), a.data_ptr(), b.data_ptr(), n, t, op, Device::cpu());
        Tensor ga = a.to(kGpu), gb = b.to(kGpu), go = Tensor::empty({n}, t, kGpu);
        reduce(go.data_ptr(), ga.data_ptr(), gb.data_ptr(), n, t, op, kGpu, after_inputs());
        sync();
        expect_same(go, want, std::string(dtype_name(t)) + " " + reduce_op_name(op));
        divide_by(want.data_ptr(), n, t, 3, Device::cpu());
        divide_by(go.data_ptr(), n, t, 3, kGpu, after_inputs());
        sync();
        expect_same(go, want, std::string("divide_by ") + dtype_name(t));
      }
    }
  }
}

TEST_F(CudaKernels, CastEveryPair) {
  uint64_t seed = 100;
  for (DType d : all_dtypes()) {
    for (DType s : all_dtypes()) {
      for (int64_t n : {1, 37, 70001}) {
        Tensor src = cast_source({n}, s, d, seed++);
        Tensor want = Tensor::empty({n}, d);
        cast(want.data_ptr(), d, src.data_ptr(), s, n, Device::cpu());
        Tensor gs = src.to(kGpu), gd = Tensor::empty({n}, d, kGpu);
        cast(gd.data_ptr(), d, gs.data_ptr(), s, n, kGpu, after_inputs());
        sync();
        expect_same(gd, want, case_name(d, s));
      }
    }
  }
}

struct StridedCase {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

std::vector<StridedCase> strided_cases() {
  return {
      {"contiguous", {33, 65}, [](const Tensor& t) { return t; }},
      {"transposed", {33, 65}, [](const Tensor& t) { return t.t(); }},
      {"narrow_long_rows", {64, 1000}, [](const Tensor& t) { return t.narrow(1, 100, 700); }},
      {"narrow_short_rows", {64, 10}, [](const Tensor& t) { return t.narrow(1, 3, 5); }},
      {"expanded",
       {1, 300},
       [](const Tensor& t) {
         return t.expand({7, 300});
       }},
      {"six_dims",
       {2, 3, 5, 4, 2, 3},
       [](const Tensor& t) {
         return t.permute({5, 1, 3, 0, 2, 4}).narrow(2, 1, 2);
       }},
      {"empty", {0, 3}, [](const Tensor& t) { return t; }},
  };
}

TEST_F(CudaKernels, PackUnpackCopyStrided) {
  uint64_t seed = 300;
  for (const StridedCase& c : strided_cases()) {
    for (DType t : all_dtypes()) {
      std::string what = std::string(c.name) + " " + dtype_name(t);
      Tensor base = random_bits_tensor(c.base, t, seed++);
      Tensor src = c.view(base);
      Tensor gsrc = c.view(base.to(kGpu));
      int64_t n = src.numel();
      // pack
      Tensor want = Tensor::empty({n}, t), got = Tensor::empty({n}, t, kGpu);
      pack(view_of(src), n ? want.data_ptr() : nullptr, Device::cpu());
      pack(view_of(gsrc), n ? got.data_ptr() : nullptr, kGpu, after_inputs());
      sync();
      expect_same(got, want, "pack " + what);
      // copy into a column-major destination
      Tensor dst_cpu = Tensor::empty(src.shape(), t), dst_gpu = Tensor::empty(src.shape(), t, kGpu);
      if (src.dim() == 2) {
        dst_cpu = Tensor::empty({src.size(1), src.size(0)}, t).t();
        dst_gpu = Tensor::empty({src.size(1), src.size(0)}, t, kGpu).t();
      }
      copy(dst_cpu, src);
      copy(dst_gpu, gsrc, after_inputs());
      sync();
      expect_same(dst_gpu, dst_cpu, "copy " + what);
      // unpack into the view of a fresh base (expanded views cannot be written)
      if (std::string(c.name) == "expanded") continue;
      Tensor flat = random_bits_tensor({n}, t, seed++);
      Tensor base_cpu = random_bits_tensor(c.base, t, seed++);
      Tensor base_gpu = base_cpu.to(kGpu);
      unpack(n ? flat.data_ptr() : nullptr, view_of(c.view(base_cpu)), Device::cpu());
      Tensor gflat = flat.to(kGpu);
      unpack(n ? gflat.data_ptr() : nullptr, view_of(c.view(base_gpu)), kGpu, after_inputs());
      sync();
      expect_same(base_gpu, base_cpu, "unpack " + what);
    }
  }
}

TEST_F(CudaKernels, CopyCastStridedEveryPair) {
  uint64_t seed = 700;
  for (DType d : all_dtypes()) {
    for (DType s : all_dtypes()) {
      for (const StridedCase& c : strided_cases()) {
        Tensor base = cast_source(c.base, s, d, seed++);
        Tensor src = c.view(base), gsrc = c.view(base.to(kGpu));
        Tensor want = Tensor::empty(src.shape(), d), got = Tensor::empty(src.shape(), d, kGpu);
        copy_cast(want, src);
        copy_cast(got, gsrc, after_inputs());
        sync();
        expect_same(got, want, std::string("copy_cast ") + case_name(d, s) + " " + c.name);
      }
    }
  }
}

TEST_F(CudaKernels, FillContiguousAndStrided) {
  for (DType t : all_dtypes()) {
    for (Scalar v : {Scalar(0), Scalar(3), Scalar(true), Scalar(2.5)}) {
      for (const StridedCase& c : strided_cases()) {
        if (std::string(c.name) == "expanded") continue;
        Tensor base = random_bits_tensor(c.base, t, 5);
        Tensor gbase = base.to(kGpu);
        fill(c.view(base), v);
        fill(c.view(gbase), v, after_inputs());
        sync();
        expect_same(gbase, base, std::string("fill ") + dtype_name(t) + " " + c.name);
      }
    }
  }
}

TEST_F(CudaKernels, ChunkCatAndSplitCopy) {
  std::mt19937_64 rng(42);
  for (DType buf_t : {DType::f32, DType::bf16, DType::f16, DType::u8}) {
    for (DType in_t : {DType::f32, DType::bf16, DType::i64}) {
      if (buf_t == DType::u8 && in_t != DType::i64) continue;
      // 150 tensors (several kernel batches), odd sizes so regions are misaligned, some strided, some empty.
      std::vector<Tensor> cpu_in, gpu_in;
      std::vector<int64_t> pads;
      int64_t total = 0;
      for (int i = 0; i < 150; ++i) {
        int64_t a = int64_t(rng() % 5), b = int64_t(rng() % 9) + 1;
        Tensor base = in_t == DType::i64 ? random_values({a, b}, in_t, rng(), 0, 200)
                                         : random_values({a, b}, in_t, rng(), -100, 100);
        bool transposed = rng() % 3 == 0;
        cpu_in.push_back(transposed ? base.t() : base);
        gpu_in.push_back(transposed ? base.to(kGpu).t() : base.to(kGpu));
        pads.push_back(base.numel() + int64_t(rng() % 4));
        total += pads.back();
      }
      std::string what = case_name(buf_t, in_t);
      Tensor want = Tensor::full({total}, 7, buf_t), got = Tensor::full({total}, 7, buf_t, kGpu);
      chunk_cat(cpu_in, want, pads);
      chunk_cat(gpu_in, got, pads, after_inputs());
      sync();
      expect_same(got, want, "chunk_cat " + what);
      // split_copy back into fresh tensors of the inputs' shapes and layouts
      std::vector<Tensor> cpu_out, gpu_out;
      for (size_t i = 0; i < cpu_in.size(); ++i) {
        bool transposed = !cpu_in[i].is_contiguous();
        Shape sh = cpu_in[i].shape();
        Shape st = transposed ? Shape{sh[1], sh[0]} : sh;
        Tensor c = Tensor::zeros(st, in_t), g = Tensor::zeros(st, in_t, kGpu);
        cpu_out.push_back(transposed ? c.t() : c);
        gpu_out.push_back(transposed ? g.t() : g);
      }
      split_copy(want, cpu_out, pads);
      split_copy(got, gpu_out, pads, after_inputs());
      sync();
      for (size_t i = 0; i < cpu_out.size(); ++i) expect_same(gpu_out[i], cpu_out[i], "split_copy " + what);
    }
  }
}

}  // namespace
}  // namespace dt::kernels
