// Rotary position embedding (GPT-NeoX "rotate half"), fused: out = x * cos + rotate_half(x) * sin, with
// rotate_half(x) = cat(-x[..., h:], x[..., :h]) and h = hd / 2. x is [..., T, hd] (floating), cos and sin are
// [T, hd] of x's dtype and device. The backward is the same op with -sin (rotate_half's adjoint is -rotate_half and
// the sin table has equal halves). CUDA work is queued on `stream`.
#pragma once

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Stream stream = {});

namespace cpu {
// Contiguous x/out [rows, t, hd] and cos/sin [t, hd].
void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t,
          int64_t hd);
}  // namespace cpu
namespace cuda {
void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t, int64_t hd,
          Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
