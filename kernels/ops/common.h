// Internal to kernels/ops: argument checks shared by the op entry points, broadcasting, and the dispatch from an
// entry point to the CPU or CUDA implementation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace dt::kernels::ops_detail {

// Throws InvalidArgument "<op>: <name> is undefined" for an undefined tensor.
void check_defined(const Tensor& t, const char* op, const char* name);
// The device shared by every defined tensor in `ts` (names parallel to ts); throws when they differ.
Device common_device(const char* op, std::initializer_list<const Tensor*> ts, std::initializer_list<const char*> names);
// Throws when a and b have different dtypes (the ops do no type promotion).
void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name);
void check_floating(const char* op, const Tensor& t, const char* name);
void check_integer(const char* op, const Tensor& t, const char* name);  // i8, i32, i64, u8
// torch broadcasting: align trailing dims; sizes must be equal or 1.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Rejects tensors with more than `max_dims` dims (the iteration structs have a fixed capacity).
void check_max_dims(const char* op, const Tensor& t, int max_dims);

// t's elements (row-major order) viewed as `shape` (same numel): a view when t is contiguous, else a copy ordered
// on `stream`. Unlike Tensor::view it also handles 0-d tensors.
Tensor reshape_contig(const Tensor& t, const Shape& shape, Stream stream);

[[noreturn]] void throw_no_cuda(const char* op, const Device& device);

// The compute (accumulation) dtype of a floating dtype: f32 for f16/bf16/f32, f64 for f64.
inline DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

int64_t prod(const Shape& s, size_t begin, size_t end);
// wrap_dim with the op named in the message ("<op>: dim 3 is out of range ...").
int64_t wrap(const char* op, int64_t dim, int64_t ndim);

// Range check of integer ids (embedding ids, class targets): the first position whose id is outside [0, hi) and
// is not `ignore`, and the number of ids that are not `ignore`. `ids` is contiguous with an integer dtype. On CUDA
// this synchronises `stream` (the answer is needed on the host).
struct IdsCheck {
  int64_t bad_pos = -1;  // -1: every id is valid
  int64_t bad_value = 0;
  int64_t valid = 0;
};
IdsCheck check_ids(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore, Stream stream);
IdsCheck check_ids_cpu(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore);
IdsCheck check_ids_cuda(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore, Stream stream);

}  // namespace dt::kernels::ops_detail

// Runs cpu_call on the CPU and cuda_call on a CUDA device (which must be usable); `stream` must be in scope.
#if defined(DT_WITH_CUDA)
#define DT_OPS_DISPATCH(device, op, cpu_call, cuda_call) \
  do {                                                   \
    (void)(op);                                          \
    if ((device).is_cpu()) {                             \
      (void)stream;                                      \
      cpu_call;                                          \
    } else {                                             \
      ::dt::DeviceGuard dt_ops_guard_(device);           \
      cuda_call;                                         \
    }                                                    \
  } while (0)
#else
#define DT_OPS_DISPATCH(device, op, cpu_call, cuda_call)    \
  do {                                                      \
    (void)stream;                                           \
    if ((device).is_cpu()) {                                \
      cpu_call;                                             \
    } else {                                                \
      ::dt::kernels::ops_detail::throw_no_cuda(op, device); \
    }                                                       \
  } while (0)
#endif
