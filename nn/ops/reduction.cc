// Reductions (nn/ops.h). The gradient is broadcast back over the reduced dims (multiplying by ones laid out like
// the input, so a reduced sharded dim comes back sharded without communication).
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

// g broadcast to x's shape and layout.
DTensor broadcast_like(const DTensor& g, const DTensor& x) { return dt::mul(ones_like(x), g); }

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
                    [dx, nd, keepdim](const G& g) { return G{broadcast_like(keep_dims(g[0], nd, keepdim), dx)}; });
}
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<int64_t> nd = normalized_dims(dims, x.dim());
  DTensor dx = x.data();
  const double n = double(count(x.shape(), nd));
  return record_one("mean", {x}, dt::mean(dx, dims, keepdim), [dx, nd, keepdim, n](const G& g) {
    return G{broadcast_like(dt::div(keep_dims(g[0], nd, keepdim), n), dx)};
  });
}
Variable amax(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amax", x, dims, keepdim, true);
}
Variable amin(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amin", x, dims, keepdim, false);
}

}  // namespace dt::nn
