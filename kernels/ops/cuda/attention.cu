// CUDA kernels of the fused attention (kernels/ops/attention.h): one warp per query row. Each lane holds up to
// kPerLane elements of the row's q, dO and output accumulator in registers (head_dim <= 32 * kPerLane); a score is
// a warp-wide dot product, and the online softmax runs on every lane alike. The backward's warp recomputes each
// probability from the log-sum-exp, writes its dQ row, and adds its share of dK and dV with atomics (dK and dV
// rows are shared by every query row that sees them). Simple and exact to the CPU's algorithm; tiled shared-memory
// versions are the next step where the GPU benchmark asks for them.
#include <limits>

#include "core/error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/attention.h"
#include "kernels/ops/cuda/common.cuh"

namespace dt::kernels::cuda {

namespace {

constexpr int kPerLane = 8;  // head_dim <= 256
constexpr int kWarpsPerBlock = 4;

struct Rows {  // key range [first, end) of query row i
  int64_t first, end;
};
__device__ inline Rows keys_of(const AttentionProblem& p, int64_t b, int64_t i) {
  int64_t first = p.key_start ? p.key_start[b] : 0;
  if (first > p.tk) first = p.tk;
  int64_t end = p.tk;
  if (p.causal) {
    end = i + (p.tk - p.tq) + 1;
    end = end < 0 ? 0 : (end > p.tk ? p.tk : end);
  }
  return {first, end < first ? first : end};
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The query row a warp works on: its (batch, head, position), the key/value head it reads, and where its q row and
// that head's keys and values start. False for a warp past the last row.
template <typename T>
struct WarpRow {
  int64_t row, b, h, i, g;
  const T *q, *k, *v;
};
template <typename T>
__device__ inline bool warp_row(const AttentionProblem& p, const T* q, const T* k, const T* v, WarpRow<T>& w) {
  w.row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w.row >= p.batch * p.q_heads * p.tq) return false;
  w.i = w.row % p.tq;
  w.h = (w.row / p.tq) % p.q_heads;
  w.b = w.row / (p.tq * p.q_heads);
  w.g = p.kv_head_of(w.h);
  w.q = q + w.b * p.q_stride[0] + w.h * p.q_stride[1] + w.i * p.q_stride[2];
  w.k = k + w.b * p.k_stride[0] + w.g * p.k_stride[1];
  w.v = v + w.b * p.v_stride[0] + w.g * p.v_stride[1];
  return true;
}

template <typename T>
__global__ void attention_forward_kernel(AttentionProblem p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const int lane = threadIdx.x & 31;
  WarpRow<T> w;
  if (!warp_row(p, q, k, v, w)) return;
  const int64_t row = w.row, i = w.i, b = w.b, d = p.head_dim;
  const T *qr = w.q, *kb = w.k, *vb = w.v;
  T qv[kPerLane], acc[kPerLane];
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t x = lane + 32 * e;
    qv[e] = x < d ? qr[x] : T(0);
    acc[e] = 0;
  }
  const Rows kr = keys_of(p, b, i);
  T m = -std::numeric_limits<T>::infinity(), l = 0;
  for (int64_t j = kr.first; j < kr.end; ++j) {
    const T* kj = kb + j * p.k_stride[2];
    T s = 0;
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t x = lane + 32 * e;
      if (x < d) s += qv[e] * kj[x];
    }
    s = warp_sum(s) * T(p.scale);
    const T mn = s > m ? s : m;
    const T corr = ops_detail::m_exp(T(m - mn)), pj = ops_detail::m_exp(T(s - mn));
    l = l * corr + pj;
    const T* vj = vb + j * p.v_stride[2];
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t x = lane + 32 * e;
      if (x < d) acc[e] = acc[e] * corr + pj * vj[x];
    }
    m = mn;
  }
  T* o = out + row * d;
  const T inv = l > 0 ? T(1) / l : T(0);
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t x = lane + 32 * e;
    if (x < d) o[x] = acc[e] * inv;
  }
  if (lane == 0) lse[row] = l > 0 ? m + ops_detail::m_log(l) : -std::numeric_limits<T>::infinity();
}

template <typename T>
__global__ void attention_backward_kernel(AttentionProblem p, const T* dout, const T* q, const T* k, const T* v,
                                          const T* out, const T* lse, T* dq, T* dk, T* dv) {
  const int lane = threadIdx.x & 31;
  WarpRow<T> w;
  if (!warp_row(p, q, k, v, w)) return;
  const int64_t row = w.row, i = w.i, b = w.b, g = w.g, d = p.head_dim;
  const T l = lse[row];
  if (l == -std::numeric_limits<T>::infinity()) return;
  const T *qr = w.q, *kb = w.k, *vb = w.v;
  T* dkb = dk + (b * p.kv_heads + g) * p.tk * d;
  T* dvb = dv + (b * p.kv_heads + g) * p.tk * d;
  T qv[kPerLane], dov[kPerLane], dqv[kPerLane];
  T delta = 0;
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t x = lane + 32 * e;
    qv[e] = x < d ? qr[x] : T(0);
    dov[e] = x < d ? dout[row * d + x] : T(0);
    dqv[e] = 0;
    if (x < d) delta += dov[e] * out[row * d + x];
  }
  delta = warp_sum(delta);
  const Rows kr = keys_of(p, b, i);
  for (int64_t j = kr.first; j < kr.end; ++j) {
    const T* kj = kb + j * p.k_stride[2];
    const T* vj = vb + j * p.v_stride[2];
    T s = 0, dp = 0;
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t x = lane + 32 * e;
      if (x < d) {
        s += qv[e] * kj[x];
        dp += dov[e] * vj[x];
      }
    }
    s = warp_sum(s) * T(p.scale);
    dp = warp_sum(dp);
    const T pj = ops_detail::m_exp(T(s - l)), ds = pj * (dp - delta) * T(p.scale);
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t x = lane + 32 * e;
      if (x < d) {
        dqv[e] += ds * kj[x];
        atomicAdd(dkb + j * d + x, ds * qv[e]);
        atomicAdd(dvb + j * d + x, pj * dov[e]);
      }
    }
  }
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t x = lane + 32 * e;
    if (x < d) dq[row * d + x] = dqv[e];
  }
}

void check_head_dim(const AttentionProblem& p) {
  if (p.head_dim > 32 * kPerLane)
    DT_THROW(Unsupported, "attention on CUDA: head_dim ", p.head_dim, " is above ", 32 * kPerLane);
}

unsigned blocks_for(const AttentionProblem& p) {
  const int64_t rows = p.batch * p.q_heads * p.tq;
  return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void attention(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, Stream stream) {
  check_head_dim(p);
  if (p.batch * p.q_heads * p.tq == 0) return;
  if (q.dtype() == DType::f64)
    attention_forward_kernel<double><<<blocks_for(p), 32 * kWarpsPerBlock, 0, as_cuda(stream)>>>(
        p, q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(), lse.data<double>());
  else
    attention_forward_kernel<float><<<blocks_for(p), 32 * kWarpsPerBlock, 0, as_cuda(stream)>>>(
        p, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>());
  check_launch("attention");
}

void attention_backward(const AttentionProblem& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, Stream stream) {
  check_head_dim(p);
  if (p.batch * p.q_heads * p.tq == 0) return;
  if (q.dtype() == DType::f64)
    attention_backward_kernel<double><<<blocks_for(p), 32 * kWarpsPerBlock, 0, as_cuda(stream)>>>(
        p, dout.data<double>(), q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(),
        lse.data<double>(), dq.data<double>(), dk.data<double>(), dv.data<double>());
  else
    attention_backward_kernel<float><<<blocks_for(p), 32 * kWarpsPerBlock, 0, as_cuda(stream)>>>(
        p, dout.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(),
        dq.data<float>(), dk.data<float>(), dv.data<float>());
  check_launch("attention_backward");
}

}  // namespace dt::kernels::cuda
