// Fused scaled-dot-product attention (FlashAttention's algorithm): softmax(q k^T * scale [+ mask]) v computed over
// tiles of keys with an online softmax, so no [Tq, Tk] score matrix exists in forward or backward; the forward keeps
// the log-sum-exp of each query row, and the backward recomputes each tile's probabilities from it.
//
// q is [B, Hq, Tq, D], k and v [B, Hkv, Tk, D] (grouped-query attention: query head h reads key/value head
// h / (Hq / Hkv), in global head numbers; the repeated k and v are never materialised). Under tensor parallelism a
// rank holds a range of the heads: q_head_offset and kv_head_offset are the global numbers of the blocks' first
// heads and `group` the global Hq / Hkv, so that a rank with some query heads and all (replicated) key/value heads
// finds the right ones.
//
// Masks: with `causal`, query i sits at position i + (Tk - Tq) and sees keys j <= that position (bottom-right
// alignment: with Tq == Tk it is the usual lower triangle; a decode step's query row sees the whole cache).
// key_start (one entry per batch row, or empty) masks keys j < key_start[b] as well (left-padded prompts). A query
// row that sees no key gets an output of zeros and a log-sum-exp of -inf (and zero gradients).
//
// f32 and f64 are computed in their own precision; f16 and bf16 in f32 (one rounding of the output). The last dim of
// q, k and v may be strided only by copying (the others any strides: a KV cache's narrowed view is read in place).
// out is contiguous [B, Hq, Tq, D] of q's dtype, lse contiguous [B, Hq, Tq] of the compute dtype. CUDA work is queued
// on `stream`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/macros.h"
#include "core/tensor.h"

namespace dt::kernels {

struct AttentionOptions {
  bool causal = true;
  double scale = 0;  // 0: 1 / sqrt(D)
  int64_t q_head_offset = 0;
  int64_t kv_head_offset = 0;
  int64_t group = 0;  // global Hq / Hkv; 0: the blocks' Hq / Hkv
  std::vector<int64_t> key_start;
};

struct AttentionResult {
  Tensor out;  // [B, Hq, Tq, D]
  Tensor lse;  // [B, Hq, Tq]
};
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {},
                          Stream stream = {});

struct AttentionGrads {
  Tensor dq, dk, dv;  // shapes of q, k, v; dk and dv hold the sums over every query head of this block that reads them
};
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const AttentionOptions& options = {},
                                  Stream stream = {});

// ---- the device loops (after validation; compute dtype f32 or f64 throughout) ----
// Element strides of q, k, v over (batch, head, position); the last dim is contiguous. out, lse, dout, dq, dk, dv
// are contiguous.
struct AttentionProblem {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, tq = 0, tk = 0, head_dim = 0;
  int64_t q_head_offset = 0, kv_head_offset = 0, group = 1;
  bool causal = true;
  double scale = 1;
  int64_t q_stride[3] = {0, 0, 0}, k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0};
  const int64_t* key_start = nullptr;  // [batch] on the tensors' device, or null
  // The local key/value head that local query head h reads.
  DT_HOST_DEVICE int64_t kv_head_of(int64_t h) const { return (q_head_offset + h) / group - kv_head_offset; }
};

namespace cpu {
void attention(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse);
void attention_backward(const AttentionProblem& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv);
}  // namespace cpu
namespace cuda {
void attention(const AttentionProblem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, Stream stream);
void attention_backward(const AttentionProblem& p, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
