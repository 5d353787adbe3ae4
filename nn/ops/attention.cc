// The fused attention on DTensors (nn/ops.h fused_attention): layouts, then kernels::attention on every rank's block.
//
// Note [Fused attention layouts]
// The kernel needs each rank's block to hold whole sequences and head dims, and the key/value heads its query heads
// read. So, per mesh dim: a Partial or a shard of T or D becomes Replicate (q, k and v); the batch dim may be sharded
// (k and v then follow q's batch sharding); the heads may be sharded (tensor parallelism). Key/value heads stay
// sharded on the mesh dims where the query heads are, when both head counts divide by the number of shards of those
// dims (each rank's query heads then read only its own key/value heads); otherwise k and v are replicated there and
// each rank reads the key/value heads of its query heads by their global numbers (grouped-query attention with fewer
// key/value heads than tp ranks: Llama's 8 kv heads on tp 16, or one kv head). In the backward, a k or v replicated
// over a mesh dim where q's heads are sharded gets a Partial(sum) gradient there: each rank holds the sum over its own
// query heads.
#include "kernels/ops/attention.h"

#include "core/error.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

namespace {

int64_t dim_of(const Placement& p) {
  const int64_t d = std::get<Shard>(p).dim;
  return d < 0 ? d + 4 : d;
}
bool shards(const Placement& p, int64_t dim) { return is_shard(p) && dim_of(p) == dim; }

struct Layouts {
  std::vector<Placement> q, kv;
};

Layouts layouts_for(const DTensor& q, const DTensor& k) {
  Layouts l{q.placements(), k.placements()};
  const size_t n = l.q.size();
  for (size_t m = 0; m < n; ++m) {
    if (is_partial(l.q[m]) || shards(l.q[m], 2) || shards(l.q[m], 3)) l.q[m] = Replicate{};
    if (shards(l.q[m], 0)) {
      l.kv[m] = Shard{0};
    } else if (!(shards(l.q[m], 1) && shards(l.kv[m], 1))) {
      l.kv[m] = Replicate{};
    }
  }
  // Key/value heads stay sharded only where the query heads are sharded on exactly the same mesh dims and both head
  // counts divide by the number of shards: then each rank's query heads read only its own key/value heads.
  int64_t head_shards = 1;
  bool same_dims = true;
  for (size_t m = 0; m < n; ++m) {
    if (shards(l.kv[m], 1)) head_shards *= q.mesh().size(int64_t(m));
    same_dims = same_dims && shards(l.q[m], 1) == shards(l.kv[m], 1);
  }
  if (!same_dims || q.shape()[1] % head_shards != 0 || k.shape()[1] % head_shards != 0)
    for (Placement& p : l.kv)
      if (shards(p, 1)) p = Replicate{};
  return l;
}

// x with `p` in the default shard order (mesh dims in order), so that q, k and v sharded on the same mesh dims hold
// the same rows of every dim.
Variable to_layout(const Variable& x, const std::vector<Placement>& p) {
  return x.spec() == ShardingSpec(p) ? x : redistribute(x, p);
}
}  // namespace

Variable fused_attention(const Variable& q, const Variable& k, const Variable& v, const FusedAttentionOptions& o) {
  DT_CHECK_ARG(q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape(),
               "nn::fused_attention: q [B, Hq, Tq, D] and k, v [B, Hkv, Tk, D] expected, got ", shape_str(q.shape()),
               ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  DT_CHECK_ARG(q.mesh() == k.mesh() && q.mesh() == v.mesh(), "nn::fused_attention: q, k and v must share a mesh");
  DT_CHECK_ARG(q.shape()[0] == k.shape()[0] && q.shape()[3] == k.shape()[3], "nn::fused_attention: q ",
               shape_str(q.shape()), " and k ", shape_str(k.shape()), " differ in batch or head_dim");
  const int64_t hq = q.shape()[1], hkv = k.shape()[1];
  DT_CHECK_ARG(hkv > 0 && hq % hkv == 0, "nn::fused_attention: ", hq, " query heads are not a multiple of ", hkv,
               " key/value heads");
  DT_CHECK_ARG(o.key_start.empty() || int64_t(o.key_start.size()) == q.shape()[0],
               "nn::fused_attention: key_start needs one entry per batch row (", q.shape()[0], "), got ",
               o.key_start.size());
  const Layouts l = layouts_for(q.data(), k.data());
  Variable qq = to_layout(q, l.q), kk = to_layout(k, l.kv), vv = to_layout(v, l.kv);
  const DTensor qd = qq.data(), kd = kk.data(), vd = vv.data();
  if (!qd.mesh().is_member()) return qq;
  kernels::AttentionOptions ko;
  ko.causal = o.causal;
  ko.scale = o.scale.value_or(0);
  ko.group = hq / hkv;
  ko.q_head_offset = qd.local_offset()[1];
  ko.kv_head_offset = kd.local_offset()[1];
  if (!o.key_start.empty()) {
    const int64_t b0 = qd.local_offset()[0], nb = qd.to_local().shape()[0];
    ko.key_start.assign(o.key_start.begin() + b0, o.key_start.begin() + b0 + nb);
  }
  kernels::AttentionResult r = kernels::attention(qd.to_local(), kd.to_local(), vd.to_local(), ko);
  DTensor out = DTensor::from_local_unchecked(r.out, qd.mesh(), qd.spec(), qd.shape());
  // The gradient layout of k and v: Partial(sum) where they are replicated over sharded query heads.
  std::vector<Placement> dkv = kd.placements();
  for (size_t m = 0; m < dkv.size(); ++m)
    if (is_replicate(dkv[m]) && shards(l.q[m], 1)) dkv[m] = Partial{};
  const ShardingSpec dkv_spec(dkv, kd.spec().shard_order());
  return record_one("fused_attention", {qq, kk, vv}, out, [qd, kd, vd, out, lse = r.lse, ko, dkv_spec](const G& g) {
    const DTensor go = g[0].spec() == out.spec() ? g[0] : g[0].redistribute(out.spec());
    kernels::AttentionGrads d = kernels::attention_backward(go.to_local(), qd.to_local(), kd.to_local(), vd.to_local(),
                                                            out.to_local(), lse, ko);
    return G{DTensor::from_local_unchecked(d.dq, qd.mesh(), qd.spec(), qd.shape()),
             DTensor::from_local_unchecked(d.dk, kd.mesh(), dkv_spec, kd.shape()),
             DTensor::from_local_unchecked(d.dv, vd.mesh(), dkv_spec, vd.shape())};
  });
}

}  // namespace dt::nn
