#include <type_traits>

#include "kernels/cast.h"
#include "kernels/convert.h"
#include "kernels/copy.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"

namespace dt::kernels::cuda {

namespace {
constexpr unsigned kBlock = 256;

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, Layout l, bool flat) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < l.numel; i += int64_t(gridDim.x) * blockDim.x) {
    if (flat) {
      dst[i] = convert<D, S>(src[i]);
    } else {
      int64_t off[2];
      layout_offsets<2>(l, i, off);
      dst[off[0]] = convert<D, S>(src[off[1]]);
    }
  }
}

template <typename D, typename S>
void launch_convert(void* dst, const void* src, const Layout& l, Stream stream) {
  convert_kernel<D, S><<<grid_for(l.numel, kBlock), kBlock, 0, as_cuda(stream)>>>(
      static_cast<D*>(dst), static_cast<const S*>(src), l, is_flat(l));
  check_launch("kernels::cuda::copy_cast");
}

// Rows of at least this many bytes go through cudaMemcpy2DAsync; shorter rows through the strided kernel.
constexpr int64_t kMemcpy2DMinRowBytes = 64;

void run(void* dst, DType dst_dtype, const void* src, DType src_dtype, const Layout& l, Stream stream) {
  if (l.numel == 0) return;
  if (dst_dtype == src_dtype) {
    const int64_t es = int64_t(dtype_size(dst_dtype));
    if (is_flat(l)) {
      ::dt::cuda_check(cudaMemcpyAsync(dst, src, size_t(l.numel * es), cudaMemcpyDeviceToDevice, as_cuda(stream)),
                       "kernels::cuda::copy (cudaMemcpyAsync)");
      return;
    }
    // Rows of contiguous runs, e.g. packing a block narrowed on an inner dim: one 2-d copy.
    if (l.ndim == 2 && l.strides[0][1] == 1 && l.strides[1][1] == 1 && l.shape[1] * es >= kMemcpy2DMinRowBytes &&
        l.strides[0][0] >= l.shape[1] && l.strides[1][0] >= l.shape[1]) {
      ::dt::cuda_check(
          cudaMemcpy2DAsync(dst, size_t(l.strides[0][0] * es), src, size_t(l.strides[1][0] * es),
                            size_t(l.shape[1] * es), size_t(l.shape[0]), cudaMemcpyDeviceToDevice, as_cuda(stream)),
          "kernels::cuda::copy (cudaMemcpy2DAsync)");
      return;
    }
    dispatch_bits(size_t(es), [&]<typename U>() { launch_convert<U, U>(dst, src, l, stream); });
    return;
  }
  dispatch_dtype(dst_dtype, [&]<typename D>() {
    dispatch_dtype(src_dtype, [&]<typename S>() {
      if constexpr (!std::is_same_v<D, S>) launch_convert<D, S>(dst, src, l, stream);
    });
  });
}
}  // namespace

void copy_cast(const StridedView& dst, const StridedView& src, Stream stream) {
  run(dst.data, dst.dtype, src.data, src.dtype, make_layout(dst, &src), stream);
}

void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count, Stream stream) {
  StridedView d = flat_view(dst, count, dst_dtype), s = flat_view(src, count, src_dtype);
  run(dst, dst_dtype, src, src_dtype, make_layout(d, &s), stream);
}

void copy_bytes(void* dst, const void* src, size_t nbytes, Stream stream) {
  ::dt::cuda_check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, as_cuda(stream)),
                   "kernels::cuda::copy_bytes");
}

}  // namespace dt::kernels::cuda
