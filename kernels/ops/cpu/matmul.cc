// CPU GEMM: BLAS for f32/f64 (transpose flags and leading dims passed through), a plain loop for integers. The BLAS is
// OpenBLAS, or oneMKL's sequential layer with -Dblas=mkl (dtensor splits a GEMM over its own threads).
#include "kernels/ops/matmul.h"

#if defined(DT_BLAS_MKL)
#include <mkl_cblas.h>
#include <mkl_service.h>
#else
#include <cblas.h>
#endif

#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops/cpu/matmul_bf16.h"

namespace dt::kernels {

#if defined(DT_BLAS_MKL)
using blasint = MKL_INT;
void set_blas_threads(int n) {
  DT_CHECK_ARG(n >= 1, "set_blas_threads: expected at least 1 thread, got ", n);
  mkl_set_num_threads(n);  // the sequential layer runs one thread whatever it is told
}
int blas_threads() { return mkl_get_max_threads(); }
#else
void set_blas_threads(int n) {
  DT_CHECK_ARG(n >= 1, "set_blas_threads: expected at least 1 thread, got ", n);
  openblas_set_num_threads(n);
}
int blas_threads() { return openblas_get_num_threads(); }
#endif

namespace cpu {

namespace {

template <typename T>
void gemm_loop(const GemmArgs& g, int64_t bi) {
  const T* a = static_cast<const T*>(g.a.data) + bi * g.a.batch_stride;
  const T* b = static_cast<const T*>(g.b.data) + bi * g.b.batch_stride;
  T* c = static_cast<T*>(g.c) + bi * g.c_batch_stride;
  auto at = [&](int64_t i, int64_t l) { return g.a.trans ? a[l * g.a.ld + i] : a[i * g.a.ld + l]; };
  auto bt = [&](int64_t l, int64_t j) { return g.b.trans ? b[j * g.b.ld + l] : b[l * g.b.ld + j]; };
  const int64_t alpha = int64_t(g.alpha), beta = int64_t(g.beta);
  std::vector<int64_t> row(size_t(g.n));
  for (int64_t i = 0; i < g.m; ++i) {
    std::fill(row.begin(), row.end(), 0);
    for (int64_t l = 0; l < g.k; ++l) {
      int64_t av = int64_t(at(i, l));
      if (av == 0) continue;
      for (int64_t j = 0; j < g.n; ++j) row[size_t(j)] += av * int64_t(bt(l, j));
    }
    for (int64_t j = 0; j < g.n; ++j) {
      int64_t prev = beta == 0 ? 0 : beta * int64_t(c[i * g.ldc + j]);
      c[i * g.ldc + j] = T(alpha * row[size_t(j)] + prev);
    }
  }
}

// The block rows [r0, r1) x columns [c0, c1) of C in batch bi through BLAS: op(A)'s rows are A's rows, or its
// columns when A is stored transposed; op(B)'s columns are B's columns, or its rows when B is stored transposed.
// y = alpha * op(M) x + beta * y through BLAS's GEMV: M stored [rows, cols] with row stride ld.
template <typename T>
void blas_gemv(bool trans, int64_t rows, int64_t cols, double alpha, const T* m, int64_t ld, const T* x, int64_t incx,
               double beta, T* y, int64_t incy) {
  const CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
  if (beta == 0)  // y may hold anything (NaN): BLAS scales it by beta first, and 0 * NaN is NaN in some versions
    for (int64_t i = 0, len = trans ? cols : rows; i < len; ++i) y[i * incy] = T(0);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemv(CblasRowMajor, t, blasint(rows), blasint(cols), float(alpha), m, blasint(ld), x, blasint(incx),
                float(beta), y, blasint(incy));
  else
    cblas_dgemv(CblasRowMajor, t, blasint(rows), blasint(cols), alpha, m, blasint(ld), x, blasint(incx), beta, y,
                blasint(incy));
}

// Note [GEMV for one row]
// A product with one row (a decode step's x [1, dim] @ W^T) or one column is a matrix-vector product. Through GEMM,
// OpenBLAS packs the whole weight into its panel layout first (sgemm_incopy: 47 % of a decode step's time on a
// 57 M-parameter Llama) and then reads the packed copy, so the weight crosses memory three times; GEMV reads it once.
template <typename T>
bool try_gemv(const GemmArgs& g, int64_t bi, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const T* a = static_cast<const T*>(g.a.data) + bi * g.a.batch_stride;
  const T* b = static_cast<const T*>(g.b.data) + bi * g.b.batch_stride;
  T* c = static_cast<T*>(g.c) + bi * g.c_batch_stride + r0 * g.ldc + c0;
  const int64_t m = r1 - r0, n = c1 - c0;
  if (m == 1 && n > 1) {  // c[1, n] = a[1, k] op(B): c^T = op(B)^T a^T
    const T* x = a + (g.a.trans ? r0 : r0 * g.a.ld);
    const int64_t incx = g.a.trans ? g.a.ld : 1;
    if (g.b.trans)  // B stored [n, k]
      blas_gemv<T>(false, n, g.k, g.alpha, b + c0 * g.b.ld, g.b.ld, x, incx, g.beta, c, 1);
    else  // B stored [k, n]
      blas_gemv<T>(true, g.k, n, g.alpha, b + c0, g.b.ld, x, incx, g.beta, c, 1);
    return true;
  }
  if (n == 1 && m > 1) {  // c[m, 1] = op(A)[m, k] b[k]
    const T* x = b + (g.b.trans ? c0 * g.b.ld : c0);
    const int64_t incx = g.b.trans ? 1 : g.b.ld;
    if (g.a.trans)  // A stored [k, m]
      blas_gemv<T>(true, g.k, m, g.alpha, a + r0, g.a.ld, x, incx, g.beta, c, g.ldc);
    else
      blas_gemv<T>(false, m, g.k, g.alpha, a + r0 * g.a.ld, g.a.ld, x, incx, g.beta, c, g.ldc);
    return true;
  }
  return false;
}

// The batches [b0, b1) of g as a GEMM of their own.
GemmArgs batch_slice(const GemmArgs& g, int64_t b0, int64_t b1) {
  const size_t size = dtype_size(g.dtype);
  GemmArgs s = g;
  s.batch = b1 - b0;
  s.a.data = static_cast<const char*>(g.a.data) + size_t(b0 * g.a.batch_stride) * size;
  s.b.data = static_cast<const char*>(g.b.data) + size_t(b0 * g.b.batch_stride) * size;
  s.c = static_cast<char*>(g.c) + size_t(b0 * g.c_batch_stride) * size;
  return s;
}

void blas_block(const GemmArgs& g, int64_t bi, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (g.dtype == DType::bf16) return gemm_bf16_block(batch_slice(g, bi, bi + 1), r0, r1, c0, c1);
  if (g.k > 0 &&
      (g.dtype == DType::f32 ? try_gemv<float>(g, bi, r0, r1, c0, c1) : try_gemv<double>(g, bi, r0, r1, c0, c1)))
    return;
  CBLAS_TRANSPOSE ta = g.a.trans ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = g.b.trans ? CblasTrans : CblasNoTrans;
  const int64_t a_off = bi * g.a.batch_stride + (g.a.trans ? r0 : r0 * g.a.ld);
  const int64_t b_off = bi * g.b.batch_stride + (g.b.trans ? c0 * g.b.ld : c0);
  const int64_t c_off = bi * g.c_batch_stride + r0 * g.ldc + c0;
  if (g.dtype == DType::f32)
    cblas_sgemm(CblasRowMajor, ta, tb, blasint(r1 - r0), blasint(c1 - c0), blasint(g.k), float(g.alpha),
                static_cast<const float*>(g.a.data) + a_off, blasint(g.a.ld),
                static_cast<const float*>(g.b.data) + b_off, blasint(g.b.ld), float(g.beta),
                static_cast<float*>(g.c) + c_off, blasint(g.ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, blasint(r1 - r0), blasint(c1 - c0), blasint(g.k), g.alpha,
                static_cast<const double*>(g.a.data) + a_off, blasint(g.a.ld),
                static_cast<const double*>(g.b.data) + b_off, blasint(g.b.ld), g.beta,
                static_cast<double*>(g.c) + c_off, blasint(g.ldc));
}

}  // namespace

void gemm(const GemmArgs& g) {
  for (int64_t v : {g.m, g.n, g.k, g.a.ld, g.b.ld, g.ldc})
    if (v > int64_t(std::numeric_limits<blasint>::max()))
      DT_THROW(Unsupported, "matmul: a matrix size or leading dim of ", v, " exceeds the BLAS integer range");
  // With intra-op threads (kernels/cpu/parallel.h) a GEMM is split over them, by batch, by rows of C or by its
  // columns, each part one BLAS call (a program that sets them keeps BLAS's own threads at 1: train_gpt does). Each
  // part packs the whole operand it does not split, so the split goes along the larger one: columns when op(B) is
  // wider than op(A) is tall (n > m). A Linear on 256 tokens (m) into 2048 features (n) packs its 4 MiB weight once
  // instead of once per thread: the MLP benchmark's one-process step at batch 2 on 2 threads, 123 -> 116 ms.
  const bool floating = g.dtype == DType::f32 || g.dtype == DType::f64 || g.dtype == DType::bf16;
  if (floating && intra_op_threads() > 1 && g.batch * g.m * g.n * g.k >= (int64_t(1) << 20)) {
    if (g.batch >= intra_op_threads()) {
      parallel_for(g.batch, 1, [&](int64_t b0, int64_t b1) {
        if (g.dtype == DType::bf16) return gemm_bf16_block(batch_slice(g, b0, b1), 0, g.m, 0, g.n);
        for (int64_t bi = b0; bi < b1; ++bi) blas_block(g, bi, 0, g.m, 0, g.n);
      });
    } else if (g.n > g.m) {
      parallel_for(g.n, 64, [&](int64_t c0, int64_t c1) {
        for (int64_t bi = 0; bi < g.batch; ++bi) blas_block(g, bi, 0, g.m, c0, c1);
      });
    } else {
      parallel_for(g.m, 32, [&](int64_t r0, int64_t r1) {
        for (int64_t bi = 0; bi < g.batch; ++bi) blas_block(g, bi, r0, r1, 0, g.n);
      });
    }
    return;
  }
  if (g.dtype == DType::bf16) return gemm_bf16_block(g, 0, g.m, 0, g.n);  // all batches in one oneDNN call
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    switch (g.dtype) {
      case DType::f32:
      case DType::f64:
        blas_block(g, bi, 0, g.m, 0, g.n);
        break;
      case DType::i8:
        gemm_loop<int8_t>(g, bi);
        break;
      case DType::i32:
        gemm_loop<int32_t>(g, bi);
        break;
      case DType::i64:
        gemm_loop<int64_t>(g, bi);
        break;
      case DType::u8:
        gemm_loop<uint8_t>(g, bi);
        break;
      default:
        DT_ASSERT(false, "cpu::gemm on dtype ", dtype_name(g.dtype));
    }
  }
}

}  // namespace cpu
}  // namespace dt::kernels
