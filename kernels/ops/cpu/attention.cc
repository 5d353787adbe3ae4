// CPU loops of the fused attention (kernels/ops/attention.h).
//
// Note [Attention on the CPU]
// Forward: one task per (batch, query head, tile of kQTile query rows), spread over the intra-op threads. A task
// walks the keys its rows may see in tiles of kKTile: S = scale * Q K^T (one GEMM), the running row maxima and sums
// of the online softmax updated, P = exp(S - max) (the vectorised exp of Note [A float exp that vectorizes]), and
// O = O * correction + P V (one GEMM). O is the output rows themselves; at the end they are divided by the sums and
// the log-sum-exp max + log(sum) is stored. Causal tiles past a row's last visible key are never computed, so the
// causal forward does about half the work of the full one.
// Backward (FlashAttention-2's): D_i = rowsum(dO_i * O_i); one task per (batch, key/value head) owns dK and dV of
// that head, so no two tasks write one row; for each tile of keys and each query head that reads it, each tile of
// query rows recomputes P = exp(scale * Q K^T - lse) and adds dV += P^T dO, dS = P * (dO V^T - D),
// dQ += scale * dS K, dK += scale * dS^T Q. Scratch is per thread and reused (one [kQTile, kKTile] tile each).
#include "kernels/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops/functors.h"
#include "kernels/ops/matmul.h"

namespace dt::kernels::cpu {

using namespace ops_detail;

namespace {

constexpr int64_t kQTile = 64, kKTile = 256;
constexpr int64_t kBwdQTile = 64, kBwdKTile = 128;

// C[m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * C through the GEMM funnel.
template <typename T>
void gemm_block(int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda, bool ta, const T* b,
                int64_t ldb, bool tb, double beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  GemmArgs g;
  g.dtype = DTypeOf<T>::value;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = {a, ta, lda, 0};
  g.b = {b, tb, ldb, 0};
  g.c = c;
  g.ldc = ldc;
  g.alpha = alpha;
  g.beta = beta;
  gemm(g);
}

// The keys query row i (0-based among Tq) may see: [first, end).
struct KeyRange {
  int64_t first, end;
};
inline KeyRange keys_of(const AttentionProblem& p, int64_t b, int64_t i) {
  const int64_t first = p.key_start ? std::min(p.key_start[b], p.tk) : 0;
  const int64_t end = p.causal ? std::clamp(i + (p.tk - p.tq) + 1, int64_t(0), p.tk) : p.tk;
  return {first, std::max(first, end)};
}

template <typename T>
std::vector<T>& scratch(size_t n, int which) {
  thread_local std::vector<T> buf[4];
  if (buf[which].size() < n) buf[which].resize(n);
  return buf[which];
}

template <typename T>
void forward_task(const AttentionProblem& p, const T* q, const T* k, const T* v, T* out, T* lse, int64_t b, int64_t h,
                  int64_t i0, int64_t i1) {
  const int64_t d = p.head_dim, rows = i1 - i0, g = p.kv_head_of(h);
  const T* qb = q + b * p.q_stride[0] + h * p.q_stride[1] + i0 * p.q_stride[2];
  const T* kb = k + b * p.k_stride[0] + g * p.k_stride[1];
  const T* vb = v + b * p.v_stride[0] + g * p.v_stride[1];
  T* o = out + ((b * p.q_heads + h) * p.tq + i0) * d;
  T* ls = lse + (b * p.q_heads + h) * p.tq + i0;
  std::fill(o, o + rows * d, T(0));
  std::vector<T>& s = scratch<T>(size_t(rows * kKTile), 0);
  std::vector<T>& mx = scratch<T>(size_t(rows), 1);
  std::vector<T>& sum = scratch<T>(size_t(rows), 2);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::fill(mx.begin(), mx.begin() + rows, neg_inf);
  std::fill(sum.begin(), sum.begin() + rows, T(0));
  const KeyRange lo = keys_of(p, b, i0), hi = keys_of(p, b, i1 - 1);
  for (int64_t j0 = lo.first; j0 < hi.end; j0 += kKTile) {
    const int64_t n = std::min(kKTile, hi.end - j0);
    T* sp = s.data();
    gemm_block<T>(rows, n, d, p.scale, qb, p.q_stride[2], false, kb + j0 * p.k_stride[2], p.k_stride[2], true, 0, sp,
                  n);
    for (int64_t r = 0; r < rows; ++r) {
      T* srow = sp + r * n;
      const KeyRange kr = keys_of(p, b, i0 + r);
      const int64_t c = std::clamp(kr.end - j0, int64_t(0), n);  // visible columns of this tile: [0, c)
      T m = mx[size_t(r)];
      for (int64_t j = 0; j < c; ++j) m = std::max(m, srow[j]);
      if (c == 0 || m == neg_inf) {
        std::fill(srow, srow + n, T(0));
        continue;
      }
      const T corr = mx[size_t(r)] == neg_inf ? T(0) : m_exp(T(mx[size_t(r)] - m));
      T acc = 0;
      for (int64_t j = 0; j < c; ++j) {
        const T e = m_exp(T(srow[j] - m));
        srow[j] = e;
        acc += e;
      }
      std::fill(srow + c, srow + n, T(0));
      sum[size_t(r)] = sum[size_t(r)] * corr + acc;
      mx[size_t(r)] = m;
      if (corr != T(1))
        for (int64_t x = 0; x < d; ++x) o[r * d + x] *= corr;
    }
    gemm_block<T>(rows, d, n, 1, sp, n, false, vb + j0 * p.v_stride[2], p.v_stride[2], false, 1, o, d);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T l = sum[size_t(r)];
    const T inv = l > 0 ? T(1) / l : T(0);
    for (int64_t x = 0; x < d; ++x) o[r * d + x] *= inv;
    ls[r] = l > 0 ? mx[size_t(r)] + m_log(l) : neg_inf;
  }
}

template <typename T>
void backward_task(const AttentionProblem& p, const T* dout, const T* q, const T* k, const T* v, const T* lse,
                   const T* delta, T* dq, T* dk, T* dv, int64_t b, int64_t g) {
  const int64_t d = p.head_dim;
  const T* kb = k + b * p.k_stride[0] + g * p.k_stride[1];
  const T* vb = v + b * p.v_stride[0] + g * p.v_stride[1];
  T* dkb = dk + (b * p.kv_heads + g) * p.tk * d;
  T* dvb = dv + (b * p.kv_heads + g) * p.tk * d;
  std::vector<T>& pt = scratch<T>(size_t(kBwdQTile * kBwdKTile), 0);
  std::vector<T>& dpt = scratch<T>(size_t(kBwdQTile * kBwdKTile), 1);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t h = 0; h < p.q_heads; ++h) {
    if (p.kv_head_of(h) != g) continue;
    const T* qh = q + b * p.q_stride[0] + h * p.q_stride[1];
    const int64_t row0 = (b * p.q_heads + h) * p.tq;
    const T* doh = dout + row0 * d;
    const T* lh = lse + row0;
    const T* dh = delta + row0;
    T* dqh = dq + row0 * d;
    for (int64_t i0 = 0; i0 < p.tq; i0 += kBwdQTile) {
      const int64_t rows = std::min(kBwdQTile, p.tq - i0);
      const KeyRange lo = keys_of(p, b, i0), hi = keys_of(p, b, i0 + rows - 1);
      for (int64_t j0 = lo.first; j0 < hi.end; j0 += kBwdKTile) {
        const int64_t n = std::min(kBwdKTile, hi.end - j0);
        T* P = pt.data();
        T* dP = dpt.data();
        const T* qt = qh + i0 * p.q_stride[2];
        const T* dot = doh + i0 * d;
        gemm_block<T>(rows, n, d, p.scale, qt, p.q_stride[2], false, kb + j0 * p.k_stride[2], p.k_stride[2], true, 0, P,
                      n);
        gemm_block<T>(rows, n, d, 1, dot, d, false, vb + j0 * p.v_stride[2], p.v_stride[2], true, 0, dP, n);
        for (int64_t r = 0; r < rows; ++r) {
          T* prow = P + r * n;
          T* dprow = dP + r * n;
          const KeyRange kr = keys_of(p, b, i0 + r);
          const int64_t c = std::clamp(kr.end - j0, int64_t(0), n);
          const T l = lh[i0 + r], dl = dh[i0 + r];
          if (l == neg_inf) {
            std::fill(prow, prow + n, T(0));
            std::fill(dprow, dprow + n, T(0));
            continue;
          }
          for (int64_t j = 0; j < c; ++j) {
            const T e = m_exp(T(prow[j] - l));
            prow[j] = e;
            dprow[j] = e * (dprow[j] - dl);
          }
          std::fill(prow + c, prow + n, T(0));
          std::fill(dprow + c, dprow + n, T(0));
        }
        // dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q.
        gemm_block<T>(n, d, rows, 1, P, n, true, dot, d, false, 1, dvb + j0 * d, d);
        gemm_block<T>(rows, d, n, p.scale, dP, n, false, kb + j0 * p.k_stride[2], p.k_stride[2], false, 1, dqh + i0 * d,
                      d);
        gemm_block<T>(n, d, rows, p.scale, dP, n, true, qt, p.q_stride[2], false, 1, dkb + j0 * d, d);
      }
    }
  }
}

template <typename Fn>
void with_compute_type(DType dtype, Fn&& fn) {
  if (dtype == DType::f64)
    fn.template operator()<double>();
  else
    fn.template operator()<float>();
}

}  // namespace

void attention(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse) {
  with_compute_type(q.dtype(), [&]<typename T>() {
    const int64_t tiles = (p.tq + kQTile - 1) / kQTile;
    const int64_t tasks = p.batch * p.q_heads * tiles;
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    T* op = out.data<T>();
    T* lp = lse.data<T>();
    parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t tile = t % tiles, bh = t / tiles;
        const int64_t i0 = tile * kQTile;
        forward_task<T>(p, qp, kp, vp, op, lp, bh / p.q_heads, bh % p.q_heads, i0, std::min(p.tq, i0 + kQTile));
      }
    });
  });
}

void attention_backward(const AttentionProblem& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) {
  with_compute_type(q.dtype(), [&]<typename T>() {
    const int64_t rows = p.batch * p.q_heads * p.tq, d = p.head_dim;
    std::vector<T> delta(static_cast<size_t>(rows));
    const T* dop = dout.data<T>();
    const T* op = out.data<T>();
    parallel_for(rows, 256, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        T s = 0;
        for (int64_t x = 0; x < d; ++x) s += dop[r * d + x] * op[r * d + x];
        delta[size_t(r)] = s;
      }
    });
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    const T* lp = lse.data<T>();
    T* dqp = dq.data<T>();
    T* dkp = dk.data<T>();
    T* dvp = dv.data<T>();
    parallel_for(p.batch * p.kv_heads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        backward_task<T>(p, dop, qp, kp, vp, lp, delta.data(), dqp, dkp, dvp, t / p.kv_heads, t % p.kv_heads);
    });
  });
}

}  // namespace dt::kernels::cpu
