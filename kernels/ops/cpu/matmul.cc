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
void blas_block(const GemmArgs& g, int64_t bi, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
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
  const bool floating = g.dtype == DType::f32 || g.dtype == DType::f64;
  if (floating && intra_op_threads() > 1 && g.batch * g.m * g.n * g.k >= (int64_t(1) << 20)) {
    if (g.batch >= intra_op_threads()) {
      parallel_for(g.batch, 1, [&](int64_t b0, int64_t b1) {
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
