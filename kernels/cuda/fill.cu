#include <cstring>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/strided.cuh"
#include "kernels/fill.h"
#include "kernels/layout.h"

namespace dt::kernels::cuda {

namespace {
constexpr unsigned kBlock = 256;

template <typename U>
__global__ void fill_kernel(U* dst, int64_t n, Indexer ix, bool flat, U value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (flat) {
      dst[i] = value;
    } else {
      int64_t d, s;
      ix.offsets(i, d, s);
      dst[d] = value;
    }
  }
}

template <typename U>
void launch_fill(void* dst, const Layout& l, uint64_t bits, Stream stream) {
  U v;
  std::memcpy(&v, &bits, sizeof(U));
  bool flat = l.ndim == 1 && l.strides[0][0] == 1;
  fill_kernel<U><<<grid_for(l.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(static_cast<U*>(dst), l.numel,
                                                                            Indexer::from(l), flat, v);
  check_launch("kernels::cuda::fill");
}
}  // namespace

void fill(const StridedView& dst, uint64_t bits, Stream stream) {
  Layout l = make_layout(dst, nullptr);
  if (l.numel == 0) return;
  size_t es = dtype_size(dst.dtype);
  if (bits == 0 && l.ndim == 1 && l.strides[0][0] == 1) {
    cudaError_t e = cudaMemsetAsync(dst.data, 0, size_t(l.numel) * es, as_cuda(stream));
    if (e != cudaSuccess) {
      cudaGetLastError();
      DT_THROW(CudaError, "kernels::cuda::fill (cudaMemsetAsync): ", cudaGetErrorString(e));
    }
    return;
  }
  switch (es) {
    case 1:
      return launch_fill<uint8_t>(dst.data, l, bits, stream);
    case 2:
      return launch_fill<uint16_t>(dst.data, l, bits, stream);
    case 4:
      return launch_fill<uint32_t>(dst.data, l, bits, stream);
    default:
      return launch_fill<uint64_t>(dst.data, l, bits, stream);
  }
}

}  // namespace dt::kernels::cuda
