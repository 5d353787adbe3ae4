// Matrix products through BLAS (OpenBLAS on the CPU, cuBLAS on CUDA), and their backward kernels.
//
// matmul follows torch.matmul: 1-d·1-d is a dot product (0-d), a 1-d left operand is a row vector and a 1-d right
// operand a column vector (the added dim is removed from the result), and the batch dims (all but the last two)
// broadcast. Operands share a dtype: f32 and f64 go to sgemm/dgemm; f16/bf16 are converted to f32 on the CPU (one
// rounding of the result) and use cublasGemmEx with f32 compute on CUDA; integer dtypes use a plain loop on the
// CPU (accumulating in i64) and are unsupported on CUDA. Transposed or otherwise strided operands are passed to
// GEMM as transpose flags and leading dims, without a copy, whenever one of the two matrix strides is 1; a
// 2-d right operand with a batched left operand is one GEMM over all rows.
// CUDA work is queued on `stream`; f32 on CUDA is computed in full f32 (no TF32).
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace dt::kernels {

Tensor matmul(const Tensor& a, const Tensor& b, Stream stream = {});
// torch.nn.functional.linear: x [..., in], weight [out, in] (torch's layout), bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Stream stream = {});

struct MatmulGrads {
  Tensor grad_a;  // a's shape (undefined unless need_grad_a)
  Tensor grad_b;  // b's shape (undefined unless need_grad_b)
};
// Gradients of matmul(a, b) given grad_out (matmul's result shape); broadcast batch dims are summed back.
MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, bool need_grad_a = true,
                            bool need_grad_b = true, Stream stream = {});

struct LinearGrads {
  Tensor grad_x;       // x's shape
  Tensor grad_weight;  // [out, in]
  Tensor grad_bias;    // [out] when need_grad_bias
};
LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, bool need_grad_bias = true,
                            Stream stream = {});

// OpenBLAS threads used by CPU GEMMs (it starts one per core): with several ranks per machine give each rank
// cores / ranks. n >= 1.
void set_blas_threads(int n);
int blas_threads();

// ---- the GEMM funnel ----
// Row-major: C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, for `batch` matrices. An operand with
// trans == false is stored [rows, cols] with row stride ld; with trans == true it is stored transposed ([cols,
// rows] with row stride ld). batch_stride 0 reuses one matrix for every batch.
struct GemmOperand {
  const void* data = nullptr;
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};
struct GemmArgs {
  DType dtype = DType::f32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  int64_t ldc = 1;
  int64_t c_batch_stride = 0;
  double alpha = 1, beta = 0;
};

namespace cpu {
void gemm(const GemmArgs& args);  // f32, f64 and integer dtypes
}  // namespace cpu

namespace cuda {
void gemm(const GemmArgs& args, Stream stream);  // f32, f64, f16, bf16
}  // namespace cuda

}  // namespace dt::kernels
