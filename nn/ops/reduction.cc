// Reductions (nn/ops.h). The gradient is broadcast back over the reduced dims (broadcast_like).
#include <set>

#include "core/error.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

namespace {

std::vector<int64_t> normalized_dims(const std::vector<int64_t>& dims, int64_t n) {
  std::set<int64_t> s;
  if (dims.empty())
    for (int64_t d = 0; d < n; ++d) s.insert(d);
  for (int64_t d : dims) s.insert(d < 0 ? d + n : d);
  return {s.begin(), s.end()};
}

// g (the reduction's result) with the reduced dims put back as size 1.
DTensor keep_dims(const DTensor& g, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return g;
  DTensor r = g;
  for (int64_t d : dims) r = dt::unsqueeze(r, d);  // ascending: each insert lands at its final index
  return r;
}

// g (reduced dims of size 1) broadcast to x's shape. dt::expand costs no multiply, but from a Replicate size-1 dim it
// stays Replicate (its strategies tie and the first wins), so where x is sharded on a reduced dim, multiplying by
// ones laid out like x gives each rank only its block.
DTensor broadcast_like(const DTensor& g, const DTensor& x, const std::vector<int64_t>& reduced) {
  for (const Placement& p : x.placements())
    for (int64_t d : reduced)
      if (is_shard(p, d)) return dt::mul(ones_like(x), g);
  return dt::expand(g, x.shape());
}

int64_t count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t c = 1;
  for (int64_t d : dims) c *= s[size_t(d)];
  return c;
}

Variable extremum(const char* name, const Variable& x, const std::vector<int64_t>& dims, bool keepdim, bool max) {
  const std::vector<int64_t> nd = normalized_dims(dims, x.dim());
  DTensor dx = x.data();
  DTensor out = max ? dt::amax(dx, dims, keepdim) : dt::amin(dx, dims, keepdim);
  return record_one(name, {x}, out, [dx, out, nd, keepdim](const G& g) {
    DTensor hit = dt::to(dt::eq(dx, keep_dims(out, nd, keepdim)), dx.dtype());
    DTensor ties = dt::sum(hit, nd, /*keepdim=*/true);
    return G{dt::mul(hit, dt::div(keep_dims(g[0], nd, keepdim), ties))};
  });
}

}  // namespace

Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<int64_t> nd = normalized_dims(dims, x.dim());
  DTensor dx = x.data();
  return record_one("sum", {x}, dt::sum(dx, dims, keepdim),
                    [dx, nd, keepdim](const G& g) { return G{broadcast_like(keep_dims(g[0], nd, keepdim), dx, nd)}; });
}
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<int64_t> nd = normalized_dims(dims, x.dim());
  DTensor dx = x.data();
  const double n = double(count(x.shape(), nd));
  return record_one("mean", {x}, dt::mean(dx, dims, keepdim), [dx, nd, keepdim, n](const G& g) {
    return G{broadcast_like(dt::div(keep_dims(g[0], nd, keepdim), n), dx, nd)};
  });
}
Variable amax(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amax", x, dims, keepdim, true);
}
Variable amin(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amin", x, dims, keepdim, false);
}

}  // namespace dt::nn
