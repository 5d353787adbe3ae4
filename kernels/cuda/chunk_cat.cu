// FSDP copy-in/copy-out on CUDA. Contiguous same-dtype tensors and the zero padding are moved by one batched kernel
// launch per kMaxSegments regions (an FSDP group has hundreds of parameters; a launch or memcpy per parameter would
// cost more than the copy); strided or casting tensors take one copy_cast launch each.
#include <algorithm>
#include <cstdint>

#include "kernels/chunk_cat.h"
#include "kernels/copy.h"
#include "kernels/cuda/launch.cuh"

namespace dt::kernels::cuda {

namespace {
constexpr int kMaxSegments = 64;
constexpr unsigned kBlock = 256;

// Passed by value (about 2 KiB of kernel parameters, below the 4 KiB limit of older toolchains).
struct Segments {
  int count = 0;
  int64_t max_words = 0;          // host only: sizes the grid
  const char* src[kMaxSegments];  // null: fill with zeros
  char* dst[kMaxSegments];
  int64_t nbytes[kMaxSegments];
  int width[kMaxSegments];  // bytes per access: 16, 8, 4, 2 or 1, dividing src, dst and nbytes
};

template <typename W>
__device__ inline void move_words(const char* src, char* dst, int64_t nbytes) {
  int64_t n = nbytes / int64_t(sizeof(W));
  W* d = reinterpret_cast<W*>(dst);
  const W* s = reinterpret_cast<const W*>(src);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    d[i] = s ? s[i] : W{};
  }
}

__global__ void segments_kernel(Segments segs) {
  int k = blockIdx.y;
  const char* s = segs.src[k];
  char* d = segs.dst[k];
  int64_t n = segs.nbytes[k];
  switch (segs.width[k]) {
    case 16:
      return move_words<uint4>(s, d, n);
    case 8:
      return move_words<uint64_t>(s, d, n);
    case 4:
      return move_words<uint32_t>(s, d, n);
    case 2:
      return move_words<uint16_t>(s, d, n);
    default:
      return move_words<uint8_t>(s, d, n);
  }
}

class SegmentBatch {
 public:
  explicit SegmentBatch(Stream stream) : stream_(stream) {}
  void add(const char* src, char* dst, int64_t nbytes) {
    if (nbytes == 0) return;
    if (segs_.count == kMaxSegments) flush();
    uintptr_t bits = uintptr_t(src) | uintptr_t(dst) | uintptr_t(nbytes);
    int w = 16;
    while (w > 1 && (bits & uintptr_t(w - 1))) w /= 2;
    int k = segs_.count++;
    segs_.src[k] = src;
    segs_.dst[k] = dst;
    segs_.nbytes[k] = nbytes;
    segs_.width[k] = w;
    segs_.max_words = std::max(segs_.max_words, nbytes / w);
  }
  void flush() {
    if (segs_.count == 0) return;
    // Enough blocks for about four accesses per thread in the largest segment.
    int64_t blocks = ceil_div(segs_.max_words, int64_t(kBlock) * 4);
    dim3 grid(unsigned(std::clamp<int64_t>(blocks, 1, 1024)), unsigned(segs_.count));
    segments_kernel<<<grid, kBlock, 0, as_cuda(stream_)>>>(segs_);
    check_launch("kernels::cuda::chunk_cat/split_copy");
    segs_.count = 0;
    segs_.max_words = 0;
  }

 private:
  Stream stream_;
  Segments segs_;
};
}  // namespace

void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype, std::span<const int64_t> padded_numels,
               Stream stream) {
  const int64_t es = int64_t(dtype_size(out_dtype));
  char* region = static_cast<char*>(out);
  SegmentBatch batch(stream);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const StridedView& in = inputs[i];
    int64_t n = in.numel();
    int64_t padded = padded_numels.empty() ? n : padded_numels[i];
    if (n > 0) {
      if (in.dtype == out_dtype && in.is_contiguous())
        batch.add(static_cast<const char*>(in.data), region, n * es);
      else
        cuda::copy_cast(contiguous_view(region, in.sizes(), out_dtype), in, stream);
    }
    batch.add(nullptr, region + n * es, (padded - n) * es);
    region += padded * es;
  }
  batch.flush();
}

void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs, Stream stream) {
  const int64_t es = int64_t(dtype_size(in_dtype));
  const char* region = static_cast<const char*>(in);
  SegmentBatch batch(stream);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const StridedView& o = outputs[i];
    int64_t n = o.numel();
    if (n > 0) {
      if (o.dtype == in_dtype && o.is_contiguous())
        batch.add(region, static_cast<char*>(o.data), n * es);
      else
        cuda::copy_cast(o, contiguous_view(region, o.sizes(), in_dtype), stream);
    }
    region += (padded_numels.empty() ? n : padded_numels[i]) * es;
  }
  batch.flush();
}

}  // namespace dt::kernels::cuda
