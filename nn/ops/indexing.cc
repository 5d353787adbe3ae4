// Broadcasting, stacking, slicing, indexing and dropout (nn/ops.h). Each backward is the DTensor op's own backward
// (sum_to, split, slice_backward, index_select_backward, gather_backward, dropout_backward), so the gradient gets
// its placements from those ops' sharding rules.
#include "core/error.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

namespace {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  DT_CHECK_ARG(dim >= -ndim && dim < ndim, "nn::", op, ": dim must be in [", -ndim, ", ", ndim, "), got ", dim);
  return dim < 0 ? dim + ndim : dim;
}

}  // namespace

Variable expand(const Variable& x, const Shape& shape) {
  return record_one("expand", {x}, dt::expand(x.data(), shape),
                    [s = x.shape()](const G& g) { return G{sum_to(g[0], s)}; });
}

Variable stack(const std::vector<Variable>& xs, int64_t dim) {
  DT_CHECK_ARG(!xs.empty(), "nn::stack: no tensors");
  const int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<DTensor> data;
  for (const Variable& x : xs) data.push_back(x.data());
  return record_one("stack", xs, dt::stack(data, d), [d, n = xs.size()](const G& g) {
    G parts = dt::split(g[0], std::vector<int64_t>(n, 1), d);
    for (DTensor& p : parts) p = dt::squeeze(p, d);
    return parts;
  });
}

Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  return record_one(
      "slice", {x}, dt::slice(x.data(), d, start, end, step),
      [s = x.shape(), d, start, end, step](const G& g) { return G{dt::slice_backward(g[0], s, d, start, end, step)}; });
}

Variable index_select(const Variable& x, int64_t dim, const DTensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  return record_one("index_select", {x}, dt::index_select(x.data(), d, index),
                    [index, d, size = x.shape()[size_t(d)]](const G& g) {
                      return G{dt::index_select_backward(g[0], index, d, size)};
                    });
}

Variable gather(const Variable& x, int64_t dim, const DTensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  return record_one("gather", {x}, dt::gather(x.data(), d, index),
                    [index, d, s = x.shape()](const G& g) { return G{dt::gather_backward(g[0], index, d, s)}; });
}

Variable dropout(const Variable& x, double p, uint64_t seed, bool training) {
  if (!training) return x;
  // The seed is captured here: the backward applies the forward's mask whatever happened to the caller since.
  return record_one("dropout", {x}, dt::dropout(x.data(), p, seed, true),
                    [p, seed](const G& g) { return G{dt::dropout_backward(g[0], p, seed)}; });
}

}  // namespace dt::nn
