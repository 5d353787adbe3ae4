// Elementwise reduction of buffers, the arithmetic of every reducing collective.
//
// out[i] = op(a[i], b[i]) for i < count; `out` may alias `a` or `b`. For ReduceOp::kAvg this computes the sum:
// averaging is sum then divide_by(n) once at the end (so that n-way averages stay exact for integers where they can).
// f16/bf16 are computed in float and rounded once per call. All pointers live on `device`; CUDA work is queued on
// `stream` (asynchronous with respect to the host), CPU work runs synchronously.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace dt::kernels {

void reduce(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op, Device device,
            Stream stream = {});

// x[i] = x[i] / divisor (integers: truncating division, as NCCL's ncclAvg).
void divide_by(void* x, int64_t count, DType dtype, int64_t divisor, Device device, Stream stream = {});

// Validates the arguments shared by the CPU and CUDA versions (non-negative count, non-null pointers when count>0).
void check_reduce_args(const void* out, const void* a, const void* b, int64_t count, DType dtype);

namespace cpu {
void reduce(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op);
void divide_by(void* x, int64_t count, DType dtype, int64_t divisor);
}  // namespace cpu

namespace cuda {
void reduce(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op, Stream stream);
void divide_by(void* x, int64_t count, DType dtype, int64_t divisor, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
