// Rotary position embedding (GPT-NeoX "rotate half"), fused: out = x * cos + rotate_half(x) * sin, with
// rotate_half(x) = cat(-x[..., h:], x[..., :h]) and h = hd / 2. x is [..., T, hd] (floating), cos and sin are
// [T, hd] of x's dtype and device, or [B, T, hd] for an x of [B, ..., T, hd] (a table per batch row: generation's
// rows sit at different positions). The backward is the same op with -sin (rotate_half's adjoint is -rotate_half and
// the sin table has equal halves). CUDA work is queued on `stream`.
#pragma once

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Stream stream = {});

namespace cpu {
// Contiguous x/out [rows, t, hd] and cos/sin [tables, t, hd]: rows / tables consecutive rows share a table.
void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t, int64_t hd,
          int64_t tables = 1);
}  // namespace cpu
namespace cuda {
void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t, int64_t hd,
          int64_t tables, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
