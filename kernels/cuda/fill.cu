#include <cstring>

#include "kernels/cuda/launch.cuh"
#include "kernels/dispatch_bits.h"
#include "kernels/fill.h"
#include "kernels/layout.h"

namespace dt::kernels::cuda {

namespace {
constexpr unsigned kBlock = 256;

template <typename U>
__global__ void fill_kernel(U* dst, Layout l, bool flat, U value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    if (flat) {
      dst[i] = value;
    } else {
      int64_t off[1];
      layout_offsets<1>(l, i, off);
      dst[off[0]] = value;
    }
  }
}

template <typename U>
void launch_fill(void* dst, const Layout& l, uint64_t bits, Stream stream) {
  U v;
  std::memcpy(&v, &bits, sizeof(U));
  fill_kernel<U><<<grid_for(l.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(static_cast<U*>(dst), l, is_flat(l), v);
  check_launch("kernels::cuda::fill");
}
}  // namespace

void fill(const StridedView& dst, uint64_t bits, Stream stream) {
  Layout l = make_layout(dst, nullptr);
  if (l.numel == 0) return;
  size_t es = dtype_size(dst.dtype);
  if (bits == 0 && is_flat(l)) {
    DT_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, size_t(l.numel) * es, as_cuda(stream)), "kernels::cuda::fill");
    return;
  }
  dispatch_bits(es, [&]<typename U>() { launch_fill<U>(dst.data, l, bits, stream); });
}

}  // namespace dt::kernels::cuda
