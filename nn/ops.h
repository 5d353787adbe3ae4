// Differentiable DTensor ops: the ops of dtensor/ops.h on Variables. Each runs the DTensor op (sharding
// propagation included) and, when an input requires grad, records a node whose backward is again DTensor ops, so
// gradients get their placements from the same rules (a Replicate input of a sharded computation gets a Partial
// gradient; nn/autograd.h reduces it once, where it is accumulated or where the next backward op needs it whole).
// Non-differentiable arguments (masks, ids, targets, conditions) are plain DTensors.
#pragma once

#include <optional>
#include <vector>

#include "dtensor/ops.h"
#include "nn/variable.h"

namespace dt::nn {

// ---- pointwise ----
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable pow(const Variable& a, const Variable& b);
Variable maximum(const Variable& a, const Variable& b);  // ties: the gradient goes to a
Variable minimum(const Variable& a, const Variable& b);
Variable add(const Variable& x, double s);
Variable sub(const Variable& x, double s);
Variable rsub(const Variable& x, double s);  // s - x
Variable mul(const Variable& x, double s);
Variable div(const Variable& x, double s);
Variable pow(const Variable& x, double s);
Variable neg(const Variable& x);
Variable abs(const Variable& x);
Variable relu(const Variable& x);
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable rsqrt(const Variable& x);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);
Variable silu(const Variable& x);
Variable gelu(const Variable& x, GeluApprox approx = GeluApprox::kNone);
Variable where(const DTensor& cond, const Variable& a, const Variable& b);
Variable masked_fill(const Variable& x, const DTensor& mask, double value);
Variable to(const Variable& x, DType dtype);

Variable operator+(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, const Variable& b);
Variable operator+(const Variable& x, double s);
Variable operator-(const Variable& x, double s);
Variable operator*(const Variable& x, double s);
Variable operator/(const Variable& x, double s);
Variable operator*(double s, const Variable& x);
Variable operator-(const Variable& x);

// ---- matrix products ----
Variable matmul(const Variable& a, const Variable& b);
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());

// ---- views and data movement ----
Variable reshape(const Variable& x, const Shape& shape);
Variable view(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x, int64_t start_dim = 0, int64_t end_dim = -1);
Variable unflatten(const Variable& x, int64_t dim, const Shape& sizes);
Variable transpose(const Variable& x, int64_t dim0, int64_t dim1);
Variable permute(const Variable& x, const std::vector<int64_t>& dims);
Variable unsqueeze(const Variable& x, int64_t dim);
Variable squeeze(const Variable& x, int64_t dim);
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable cat(const std::vector<Variable>& xs, int64_t dim = 0);
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
Variable tril(const Variable& x, int64_t diagonal = 0);
Variable triu(const Variable& x, int64_t diagonal = 0);

// ---- reductions ----
Variable sum(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable mean(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable amax(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);  // ties share
Variable amin(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// ---- network layers' functions ----
Variable softmax(const Variable& x, int64_t dim);
Variable log_softmax(const Variable& x, int64_t dim);
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight = Variable(),
                    const Variable& bias = Variable(), double eps = 1e-5);
Variable rms_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight = Variable(),
                  double eps = 1e-6);
Variable embedding(const DTensor& ids, const Variable& weight);
Variable cross_entropy(const Variable& logits, const DTensor& targets, int64_t ignore_index = -100,
                       LossReduction reduction = LossReduction::kMean);
// Causal (or full) attention softmax(q k^T * scale [+ causal mask]) v over [..., T, hd] (heads are a batch dim, so
// heads sharded over tp stay sharded). scale defaults to 1/sqrt(hd).
// `mask` (optional): causal_mask(T, T, mesh), for callers that reuse it across calls.
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool causal = true,
                                      std::optional<double> scale = std::nullopt, const DTensor& mask = DTensor());
// Fused attention (kernels/ops/attention.h): softmax(q k^T * scale [+ causal mask]) v with an online softmax over
// key tiles, so no [Tq, Tk] tensor exists in forward or backward (the backward recomputes from the saved
// log-sum-exp). q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D] with Hq a multiple of Hkv (grouped-query attention,
// without repeating k and v). Causal masks are bottom-right aligned: query i sits at position i + Tk - Tq (a decode
// step's single query sees the whole cache). key_start (one per batch row, global) masks keys before it (left
// padding). Any layout: heads and batch may stay sharded, the rest is replicated first (Note [Fused attention
// layouts] in nn/ops/attention.cc).
struct FusedAttentionOptions {
  bool causal = true;
  std::optional<double> scale;  // default 1 / sqrt(D)
  std::vector<int64_t> key_start;
};
Variable fused_attention(const Variable& q, const Variable& k, const Variable& v,
                         const FusedAttentionOptions& options = {});
// True above the diagonal of [tq, tk] (the positions a causal query may not see), Replicate on `mesh`.
DTensor causal_mask(int64_t tq, int64_t tk, const DeviceMesh& mesh);
// Rotary position embedding (GPT-NeoX "rotate half"): x * cos + rotate_half(x) * sin, x [..., T, hd], cos and sin
// [T, hd] (rope_tables).
Variable apply_rope(const Variable& x, const DTensor& cos, const DTensor& sin);
struct RopeTables {
  DTensor cos, sin;
};
// cos/sin of t * theta^(-2j/hd), each [T, hd] (the half-table repeated), Replicate on `mesh`.
RopeTables rope_tables(int64_t seq, int64_t head_dim, double theta, const DeviceMesh& mesh, DType dtype = DType::f32);
// Llama 3's RoPE frequency scaling (Hugging Face rope_type "llama3"): wavelengths longer than
// original_max_positions / low_freq_factor are divided by factor, shorter than original_max_positions /
// high_freq_factor kept, and those between interpolated smoothly. factor 0: no scaling.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 8192;
  bool enabled() const { return factor > 0; }
};
// The head_dim / 2 inverse frequencies theta^(-2j/hd), scaled.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling = {});
// cos/sin of positions start .. start + seq - 1 times inv_freq, each [seq, 2 * inv_freq.size()].
RopeTables rope_tables(int64_t start, int64_t seq, const std::vector<double>& inv_freq, const DeviceMesh& mesh,
                       DType dtype = DType::f32);
// One table per batch row, [starts.size(), seq, head_dim]: row b holds positions starts[b] .. starts[b] + seq - 1
// (generation, where left-padded rows sit at different positions; a negative start is a padding slot's position,
// masked by attention, harmless here). apply_rope takes either form.
RopeTables rope_tables(const std::vector<int64_t>& starts, int64_t seq, const std::vector<double>& inv_freq,
                       const DeviceMesh& mesh, DType dtype = DType::f32);

// ---- placements ----
// Differentiable redistribute: the gradient is redistributed back to x's placements, with Partial replaced by
// Replicate (the gradient of a reduction is the same on every rank), as PyTorch's.
Variable redistribute(const Variable& x, std::vector<Placement> placements);
// The same local blocks read under other placements (PyTorch's DTensor.from_local(x.to_local(), mesh, placements)):
// no communication. The gradient comes back by the same reinterpretation, after being redistributed to
// grad_placements (default: `placements`), e.g. Partial -> Replicate for a reinterpretation R -> P.
Variable reinterpret(const Variable& x, std::vector<Placement> placements,
                     std::optional<std::vector<Placement>> grad_placements = std::nullopt,
                     std::optional<Shape> global_shape = std::nullopt);

// ---- broadcasting, stacking, slicing, indexing (torch semantics; dtensor/ops/view.h, dtensor/ops/index.h) ----
Variable expand(const Variable& x, const Shape& shape);  // backward: sum_to x's shape
Variable stack(const std::vector<Variable>& xs, int64_t dim = 0);
// x[start:end:step] along dim (Python bounds, step >= 1).
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable index_select(const Variable& x, int64_t dim, const DTensor& index);  // index: 1-d integer
Variable gather(const Variable& x, int64_t dim, const DTensor& index);        // index: x's ndim, integer
// Dropout with the mask of dt::dropout (a function of (seed, global index) only: the same on every mesh and
// placement). The node keeps `seed`, so its backward applies the forward's mask. training == false returns x.
Variable dropout(const Variable& x, double p, uint64_t seed, bool training = true);

// Sums grad over the dims that broadcasting expanded so that it has `shape`.
DTensor sum_to(const DTensor& grad, const Shape& shape);

}  // namespace dt::nn
