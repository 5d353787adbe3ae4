// CUDA GEMM through cuBLAS (host code). Row-major C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T, so the operands are swapped and no data is transposed.
#include "kernels/ops/matmul.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <limits>
#include <unordered_map>

#include "core/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace dt::kernels::cuda {

namespace {

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) DT_THROW(CudaError, what, ": ", cublasGetStatusString(s));
}

// One handle per (thread, device), created on first use. Handles are leaked on purpose: destroying them from
// thread-exit destructors can run after the CUDA runtime shut down.
cublasHandle_t handle_for_current_device() {
  int dev = 0;
  DT_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::unordered_map<int, cublasHandle_t>* handles = new std::unordered_map<int, cublasHandle_t>();
  auto it = handles->find(dev);
  if (it != handles->end()) return it->second;
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handles->emplace(dev, h);
  return h;
}

int checked_int(int64_t v, const char* what) {
  if (v > int64_t(std::numeric_limits<int>::max()))
    DT_THROW(Unsupported, "matmul on CUDA: ", what, " = ", v, " exceeds cuBLAS's int range");
  return int(v);
}

}  // namespace

void gemm(const GemmArgs& g, Stream stream) {
  cudaDataType_t type;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (g.dtype) {
    case DType::f32:
      type = CUDA_R_32F;
      break;
    case DType::f64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::f16:
      type = CUDA_R_16F;
      break;
    case DType::bf16:
      type = CUDA_R_16BF;
      break;
    default:
      DT_THROW(Unsupported, "matmul on CUDA: dtype ", dtype_name(g.dtype), " is not supported");
  }
  float alpha_f = float(g.alpha), beta_f = float(g.beta);
  double alpha_d = g.alpha, beta_d = g.beta;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta_d) : &beta_f;
  cublasHandle_t h = handle_for_current_device();
  check_cublas(cublasSetStream(h, kernels::cuda::as_cuda(stream)), "cublasSetStream");
  cublasOperation_t op_a = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = checked_int(g.m, "m"), n = checked_int(g.n, "n"), k = checked_int(g.k, "k");
  int lda = checked_int(g.a.ld, "lda"), ldb = checked_int(g.b.ld, "ldb"), ldc = checked_int(g.ldc, "ldc");
  if (g.batch == 1) {
    check_cublas(cublasGemmEx(h, op_b, op_a, n, m, k, alpha, g.b.data, type, ldb, g.a.data, type, lda, beta, g.c, type,
                              ldc, compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  } else {
    check_cublas(
        cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, alpha, g.b.data, type, ldb, g.b.batch_stride, g.a.data, type,
                                   lda, g.a.batch_stride, beta, g.c, type, ldc, g.c_batch_stride,
                                   checked_int(g.batch, "batch"), compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  }
}

}  // namespace dt::kernels::cuda
