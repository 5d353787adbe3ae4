// The functions behind network layers (nn/ops.h): softmax, norms, embedding, cross-entropy, attention, RoPE.
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "dtensor/factory.h"
#include "dtensor/ops/dispatch.h"
#include "kernels/ops/rope.h"
#include "nn/autograd.h"
#include "nn/ops.h"
#include "placement/layout.h"

namespace dt::nn {

using G = std::vector<DTensor>;

namespace {

DTensor ones_weight(const Shape& shape, DType dtype, const DeviceMesh& mesh) {
  return dt::ones(shape, mesh, std::vector<Placement>(size_t(mesh.ndim()), Replicate{}),
                  {.dtype = dtype, .seed = 0, .shard_order = {}});
}

// The gradient of an output in the output's own layout (Partial replaced by Replicate): the backward runs in the
// forward's layout, as Megatron's does. Without it a backward op could pick another layout that is cheaper for itself
// (e.g. reduce-scatter a Partial gradient instead of all-reducing it) and move the cost, and more collectives, to
// the ops after it.
DTensor in_forward_layout(const DTensor& g, const ShardingSpec& out) {
  if (g.spec() == out) return g;
  std::vector<Placement> p = out.placements();
  for (Placement& x : p)
    if (is_partial(x)) x = Replicate{};
  ShardingSpec want(p, out.shard_order());
  return g.spec() == want ? g : g.redistribute(want);
}

}  // namespace

Variable softmax(const Variable& x, int64_t dim) {
  DTensor out = dt::softmax(x.data(), dim);
  return record_one("softmax", {x}, out, [out, dim](const G& g) {
    return G{ops::dispatch_one("softmax_backward", {in_forward_layout(g[0], out.spec()), out},
                               ops::OpParams().set("dim", dim))};
  });
}
Variable log_softmax(const Variable& x, int64_t dim) {
  DTensor out = dt::log_softmax(x.data(), dim);
  return record_one("log_softmax", {x}, out, [out, dim](const G& g) {
    return G{ops::dispatch_one("log_softmax_backward", {in_forward_layout(g[0], out.spec()), out},
                               ops::OpParams().set("dim", dim))};
  });
}

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, const Variable& bias,
                    double eps) {
  DLayerNormResult r =
      dt::layer_norm_with_stats(x.data(), normalized_shape, weight.defined() ? weight.data() : DTensor(),
                                bias.defined() ? bias.data() : DTensor(), eps);
  DTensor dx = x.data();
  DTensor w = weight.defined() ? weight.data() : ones_weight(normalized_shape, x.dtype(), x.mesh());
  return record_one("layer_norm", {x, weight, bias}, r.out,
                    [dx, w, mean = r.mean, rstd = r.rstd, out = r.out.spec()](const G& g) {
                      return ops::dispatch("layer_norm_backward", {in_forward_layout(g[0], out), dx, w, mean, rstd});
                    });
}

Variable rms_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight, double eps) {
  DRmsNormResult r =
      dt::rms_norm_with_stats(x.data(), normalized_shape, weight.defined() ? weight.data() : DTensor(), eps);
  DTensor dx = x.data();
  DTensor w = weight.defined() ? weight.data() : ones_weight(normalized_shape, x.dtype(), x.mesh());
  return record_one("rms_norm", {x, weight}, r.out, [dx, w, rstd = r.rstd, out = r.out.spec()](const G& g) {
    return ops::dispatch("rms_norm_backward", {in_forward_layout(g[0], out), dx, w, rstd});
  });
}

Variable embedding(const DTensor& ids, const Variable& weight) {
  const int64_t vocab = weight.shape().at(0);
  return record_one("embedding", {weight}, dt::embedding(ids, weight.data()), [ids, vocab](const G& g) {
    return G{ops::dispatch_one("embedding_backward", {g[0], ids}, ops::OpParams().set("num_embeddings", vocab))};
  });
}

Variable cross_entropy(const Variable& logits, const DTensor& targets, int64_t ignore_index, LossReduction reduction) {
  DTensor dl = logits.data();
  DCrossEntropyResult r = dt::cross_entropy_with_lse(dl, targets, ignore_index, reduction);
  return record_one("cross_entropy", {logits}, r.loss, [dl, targets, lse = r.lse, ignore_index, reduction](const G& g) {
    return G{ops::dispatch_one("cross_entropy_backward", {g[0], dl, targets, lse},
                               ops::OpParams().set("ignore_index", ignore_index).set("reduction", int64_t(reduction)))};
  });
}

DTensor causal_mask(int64_t tq, int64_t tk, const DeviceMesh& mesh) {
  Tensor mask = Tensor::zeros({tq, tk}, DType::b8);
  auto* m = mask.data<bool>();
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = i + 1; j < tk; ++j) m[i * tk + j] = true;
  return as_replicate(mask, mesh);
}

Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool causal,
                                      std::optional<double> scale, const DTensor& mask) {
  DT_CHECK_ARG(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
               "nn::scaled_dot_product_attention: q, k, v must be [..., T, head_dim] of one rank, got ",
               shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  const int64_t hd = q.shape().back();
  const double s = scale.value_or(1.0 / std::sqrt(double(hd)));
  Variable scores = mul(matmul(q, transpose(k, -1, -2)), s);
  if (causal) {
    const int64_t tq = q.shape()[size_t(q.dim() - 2)], tk = k.shape()[size_t(k.dim() - 2)];
    DT_CHECK_ARG(!mask.defined() || mask.shape() == Shape({tq, tk}), "nn::scaled_dot_product_attention: the mask ",
                 "must be [", tq, ", ", tk, "], got ", shape_str(mask.shape()));
    scores = masked_fill(scores, mask.defined() ? mask : causal_mask(tq, tk, q.mesh()), -INFINITY);
  }
  return matmul(softmax(scores, -1), v);
}

RopeTables rope_tables(int64_t seq, int64_t head_dim, double theta, const DeviceMesh& mesh, DType dtype) {
  return rope_tables(0, seq, rope_inv_freq(head_dim, theta), mesh, dtype);
}

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& sc) {
  DT_CHECK_ARG(head_dim > 0 && head_dim % 2 == 0, "nn::rope_tables: head_dim must be even and positive, got ",
               head_dim);
  DT_CHECK_ARG(theta > 0, "nn::rope_tables: rope_theta must be positive, got ", theta);
  std::vector<double> f(size_t(head_dim / 2));
  for (size_t j = 0; j < f.size(); ++j) f[j] = std::pow(theta, -2.0 * double(j) / double(head_dim));
  if (!sc.enabled()) return f;
  DT_CHECK_ARG(sc.high_freq_factor > sc.low_freq_factor && sc.low_freq_factor > 0 && sc.original_max_positions > 0,
               "nn::rope_inv_freq: llama3 scaling needs high_freq_factor > low_freq_factor > 0 and a positive "
               "original_max_position_embeddings, got ",
               sc.high_freq_factor, ", ", sc.low_freq_factor, ", ", sc.original_max_positions);
  const double old_len = double(sc.original_max_positions);
  const double low_wavelen = old_len / sc.low_freq_factor, high_wavelen = old_len / sc.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x /= sc.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_len / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
      x = (1 - smooth) * x / sc.factor + smooth * x;
    }
  }
  return f;
}

RopeTables rope_tables(int64_t start, int64_t seq, const std::vector<double>& inv_freq, const DeviceMesh& mesh,
                       DType dtype) {
  RopeTables r = rope_tables(std::vector<int64_t>{start}, seq, inv_freq, mesh, dtype);
  return {dt::reshape(r.cos, {seq, r.cos.shape()[2]}), dt::reshape(r.sin, {seq, r.sin.shape()[2]})};
}

RopeTables rope_tables(const std::vector<int64_t>& starts, int64_t seq, const std::vector<double>& inv_freq,
                       const DeviceMesh& mesh, DType dtype) {
  DT_CHECK_ARG(seq >= 0 && !inv_freq.empty() && !starts.empty(), "nn::rope_tables: ", starts.size(),
               " start positions, ", seq, " positions and ", inv_freq.size(), " frequencies");
  const int64_t half = int64_t(inv_freq.size()), head_dim = 2 * half, rows = int64_t(starts.size());
  Tensor c = Tensor::empty({rows, seq, head_dim}, DType::f64), s = Tensor::empty({rows, seq, head_dim}, DType::f64);
  double* pc = c.data<double>();
  double* ps = s.data<double>();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double a = double(starts[size_t(b)] + t) * inv_freq[size_t(j)];
        const int64_t at = (b * seq + t) * head_dim + j;
        pc[at] = pc[at + half] = std::cos(a);
        ps[at] = ps[at + half] = std::sin(a);
      }
  return RopeTables{as_replicate(c.to(dtype), mesh), as_replicate(s.to(dtype), mesh)};
}

namespace {

// The fused rotary kernel on every rank's block. The last two dims (T, head_dim) must be whole and x not Partial:
// otherwise those mesh dims are replicated first (the GPT's heads-sharded q and k need nothing).
DTensor rope_blocks(const DTensor& x, const DTensor& cos, const DTensor& sin) {
  const int64_t n = x.dim();
  bool local = true;
  std::vector<Placement> p = x.placements();
  for (Placement& q : p)
    if (is_partial(q) || is_shard(q, n - 1) || is_shard(q, n - 2)) {
      q = Replicate{};
      local = false;
    }
  DTensor xx = local ? x : x.redistribute(p);
  if (!xx.mesh().is_member()) return xx;
  Tensor c = cos.to_local(), s = sin.to_local();
  if (c.dim() == 3) {  // a table per batch row: this block's rows
    const int64_t b0 = xx.local_offset()[0], nb = xx.to_local().shape()[0];
    c = c.narrow(0, b0, nb);
    s = s.narrow(0, b0, nb);
  }
  Tensor out = kernels::rope(xx.to_local(), c, s);
  return DTensor::from_local_unchecked(out, xx.mesh(), xx.spec(), xx.shape());
}

}  // namespace

Variable apply_rope(const Variable& x, const DTensor& cos, const DTensor& sin) {
  const bool per_row = cos.dim() == 3 && x.dim() >= 3;
  const Shape table = per_row ? Shape({x.shape()[0], x.shape()[size_t(x.dim() - 2)], x.shape().back()})
                              : Shape({x.dim() >= 2 ? x.shape()[size_t(x.dim() - 2)] : -1, x.shape().back()});
  DT_CHECK_ARG(x.dim() >= 2 && cos.shape() == table && sin.shape() == cos.shape(), "nn::apply_rope: x [..., T, ",
               "head_dim] ", shape_str(x.shape()), " needs cos and sin [T, head_dim] (or [B, T, head_dim]), got ",
               shape_str(cos.shape()), " and ", shape_str(sin.shape()));
  DTensor out = rope_blocks(x.data(), cos, sin);
  // The adjoint: rotate_half's transpose is -rotate_half and sin's halves are equal, so it is rope with -sin.
  return record_one("rope", {x}, out, [cos, sin](const G& g) { return G{rope_blocks(g[0], cos, dt::neg(sin))}; });
}

Variable redistribute(const Variable& x, std::vector<Placement> placements) {
  std::vector<Placement> back = x.placements();
  for (Placement& p : back)
    if (is_partial(p)) p = Replicate{};
  ShardingSpec back_spec(back, x.spec().shard_order());
  return record_one("redistribute", {x}, x.data().redistribute(std::move(placements)),
                    [back_spec](const G& g) { return G{g[0].redistribute(back_spec)}; });
}

Variable reinterpret(const Variable& x, std::vector<Placement> placements,
                     std::optional<std::vector<Placement>> grad_placements, std::optional<Shape> global_shape) {
  DTensor out = DTensor::from_local(x.to_local(), x.mesh(), placements, global_shape);
  std::vector<Placement> gp = grad_placements.value_or(placements);
  return record_one("reinterpret", {x}, out, [gp, in_spec = x.spec(), in_shape = x.shape()](const G& g) {
    DTensor gg = g[0].redistribute(gp);
    return G{DTensor::from_local(gg.to_local(), gg.mesh(), in_spec.placements(), in_shape)};
  });
}

}  // namespace dt::nn
