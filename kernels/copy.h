// Data movement on one device: strided copies, pack/unpack of strided blocks, and strided copies with a cast.
//
// pack/unpack are what a collective needs around a contiguous transfer buffer when it works on a dim other than
// 0 (all-gather on dim 1, all-to-all between shardings): pack gathers a strided block into consecutive elements in
// row-major order, unpack scatters them back. copy is the general same-dtype strided copy (src may broadcast with
// stride 0); copy_cast also converts the element type (see kernels/convert.h for the conversion rules).
//
// All pointers live on `device`; CUDA work is queued on `stream` of the current CUDA device (asynchronous with
// respect to the host), CPU work runs synchronously. Sources and destinations must not overlap. No call allocates.
// On the CPU, contiguous innermost runs are moved with memcpy, so packing rows runs at memcpy speed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/strided_view.h"

namespace dt::kernels {

// dst[0 .. numel) = src's elements in row-major order. dst has src.dtype.
void pack(const StridedView& src, void* dst, Device device, Stream stream = {});
// dst's elements (row-major order) = src[0 .. numel). src has dst.dtype.
void unpack(const void* src, const StridedView& dst, Device device, Stream stream = {});
// Same shape, same dtype.
void copy(const StridedView& dst, const StridedView& src, Device device, Stream stream = {});
// Same shape, any dtypes.
void copy_cast(const StridedView& dst, const StridedView& src, Device device, Stream stream = {});
// memcpy on the device, ordered on `stream`.
void copy_bytes(void* dst, const void* src, size_t nbytes, Device device, Stream stream = {});

// Host copies whose stores bypass the cache (Note [Streaming copies] in kernels/cpu/stream_copy.h), for algorithms
// that copy a large buffer piece by piece through a cache-sized slot: stream each piece when the whole is at least
// stream_copy_min_bytes(), then call stream_copy_fence() once, before the data is handed to another thread or
// process. (copy_bytes and copy decide by themselves.)
size_t stream_copy_min_bytes();
void stream_copy_bytes(void* dst, const void* src, size_t nbytes);
void stream_copy_fence();

// Tensor versions: both tensors on one device, the same shape (expand() a source to broadcast it).
void copy(const Tensor& dst, const Tensor& src, Stream stream = {});
void copy_cast(const Tensor& dst, const Tensor& src, Stream stream = {});

// Validates the arguments of copy / copy_cast (same_dtype: whether the dtypes must match); `what` names the call.
void check_copy_args(const StridedView& dst, const StridedView& src, bool same_dtype, const char* what);

namespace cpu {
// Arguments already validated. Same dtypes: memcpy of contiguous runs; otherwise element conversion.
void copy_cast(const StridedView& dst, const StridedView& src);
}  // namespace cpu

namespace cuda {
void copy_cast(const StridedView& dst, const StridedView& src, Stream stream);
void copy_bytes(void* dst, const void* src, size_t nbytes, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
