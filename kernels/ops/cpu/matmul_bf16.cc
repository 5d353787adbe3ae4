// CPU bf16 GEMM through oneDNN's matmul primitive (Note [bf16 GEMM on the CPU]). Built when Meson finds oneDNN
// (-Donednn, default auto: Debian's libdnnl-dev); without it, or on a CPU without bf16 instructions, bf16 products
// are converted to f32 and go through the BLAS (kernels/ops/matmul.cc).
#include "kernels/ops/cpu/matmul_bf16.h"

#include "core/error.h"

#if defined(DT_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

// libgomp's (oneDNN's OpenMP runtime): declared here so that no compiler needs its omp.h.
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);
#endif

namespace dt::kernels::cpu {

// Note [bf16 GEMM on the CPU]
// OpenBLAS 0.3.21 (Debian's) has no bf16 GEMM, so a bf16 product used to be three passes: both operands converted
// to f32, sgemm, the result rounded back. On a CPU with AVX512-BF16 (or AMX) oneDNN multiplies bf16 pairs natively
// with f32 accumulation: 205-212 GFLOP/s on one core of this repository's EPYC against sgemm's 74-96 (512-2048 rows,
// 512-1024 wide, the primitive descriptor made on every call). The semantics are the conversion path's: products
// accumulated in f32, rounded once to bf16 (only the order of the f32 sums differs, as between two BLAS builds).
// - oneDNN is used only where its implementation is a native one: the first call makes a descriptor and refuses a
//   reference ("ref:") implementation, which is slower than the conversion path by orders of magnitude. So a CPU
//   without bf16 instructions (a Zen 3) keeps the conversion path, whatever the build.
// - Debian's oneDNN runs on OpenMP. dtensor splits a GEMM over its own intra-op threads (kernels/cpu/parallel.h) as
//   it does for the BLAS; each part is one oneDNN call told to use one thread (the calling thread's OpenMP setting,
//   put back after), so no OpenMP team is started and nothing spins beside dtensor's threads.
// - alpha is the output scale, beta = 1 a sum post-op (linear's bias is copied into C first); other betas are not
//   asked for by run_gemm.

#if defined(DT_HAVE_ONEDNN)
namespace {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The oneDNN descriptor of one operand block: [batch, rows, cols] with the given strides (a batch stride of 0 is a
// broadcast: oneDNN takes a batch dim of 1 for it).
dnnl::memory::desc block_desc(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols, int64_t row_stride,
                              int64_t col_stride) {
  using dims = dnnl::memory::dims;
  const int64_t b = batch_stride == 0 ? 1 : batch;
  return dnnl::memory::desc(dims{b, rows, cols}, dnnl::memory::data_type::bf16,
                            dims{batch_stride == 0 ? rows * cols : batch_stride, row_stride, col_stride});
}

struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

bool native_impl_available() {
  try {
    const OneThread one;
    auto a = block_desc(1, 0, 64, 64, 64, 1), b = block_desc(1, 0, 64, 64, 64, 1);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, a), engine());
    const std::string impl = pd.impl_info_str();
    return impl.rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool has_bf16_gemm() {
  static const bool available = native_impl_available();
  return available;
}

void gemm_bf16_block(const GemmArgs& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  DT_ASSERT(g.beta == 0 || g.beta == 1, "gemm_bf16_block: beta ", g.beta);
  const OneThread one;
  const int64_t m = r1 - r0, n = c1 - c0, k = g.k;
  // op(A) [m, k]: A stored [m, k] (row stride ld) or transposed [k, m]; op(B) [k, n] likewise.
  const int64_t a_off = g.a.trans ? r0 : r0 * g.a.ld, b_off = g.b.trans ? c0 * g.b.ld : c0;
  auto ad = g.a.trans ? block_desc(g.batch, g.a.batch_stride, m, k, 1, g.a.ld)
                      : block_desc(g.batch, g.a.batch_stride, m, k, g.a.ld, 1);
  auto bd = g.b.trans ? block_desc(g.batch, g.b.batch_stride, k, n, 1, g.b.ld)
                      : block_desc(g.batch, g.b.batch_stride, k, n, g.b.ld, 1);
  const int64_t c_stride = g.batch > 1 ? g.c_batch_stride : m * g.ldc;
  auto cd = block_desc(g.batch, c_stride, m, n, g.ldc, 1);
  dnnl::primitive_attr attr;
  if (g.alpha != 1) attr.set_output_scales(0, {float(g.alpha)});
  if (g.beta == 1) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, engine());
  using u16 = uint16_t;
  auto* a = const_cast<u16*>(static_cast<const u16*>(g.a.data)) + a_off;
  auto* b = const_cast<u16*>(static_cast<const u16*>(g.b.data)) + b_off;
  auto* c = static_cast<u16*>(g.c) + r0 * g.ldc + c0;
  dnnl::stream s(engine());
  dnnl::matmul(pd).execute(s, {{DNNL_ARG_SRC, dnnl::memory(ad, engine(), a)},
                               {DNNL_ARG_WEIGHTS, dnnl::memory(bd, engine(), b)},
                               {DNNL_ARG_DST, dnnl::memory(cd, engine(), c)}});
  s.wait();
}

#else

bool has_bf16_gemm() { return false; }

void gemm_bf16_block(const GemmArgs&, int64_t, int64_t, int64_t, int64_t) {
  DT_ASSERT(false, "gemm_bf16_block: built without oneDNN");
}

#endif

}  // namespace dt::kernels::cpu
