// Views and data movement (nn/ops.h): every backward moves the gradient back the same way.
#include <numeric>

#include "core/error.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::nn {

using G = std::vector<DTensor>;

namespace {

// Zeros of `shape` laid out like `like` (its placements fit any shape whose sharded dims are whole here).
DTensor zeros_shaped_like(const DTensor& like, const Shape& shape) {
  return zeros_like(OutputLayout{like.mesh(), like.spec(), shape, like.dtype()});
}

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) {
  return record_one("reshape", {x}, dt::reshape(x.data(), shape),
                    [s = x.shape()](const G& g) { return G{dt::reshape(g[0], s)}; });
}
Variable view(const Variable& x, const Shape& shape) { return reshape(x, shape); }
Variable flatten(const Variable& x, int64_t start_dim, int64_t end_dim) {
  return record_one("flatten", {x}, dt::flatten(x.data(), start_dim, end_dim),
                    [s = x.shape()](const G& g) { return G{dt::reshape(g[0], s)}; });
}
Variable unflatten(const Variable& x, int64_t dim, const Shape& sizes) {
  return record_one("unflatten", {x}, dt::unflatten(x.data(), dim, sizes),
                    [s = x.shape()](const G& g) { return G{dt::reshape(g[0], s)}; });
}
Variable transpose(const Variable& x, int64_t dim0, int64_t dim1) {
  return record_one("transpose", {x}, dt::transpose(x.data(), dim0, dim1),
                    [dim0, dim1](const G& g) { return G{dt::transpose(g[0], dim0, dim1)}; });
}
Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  DTensor out = dt::permute(x.data(), dims);
  std::vector<int64_t> inverse(dims.size());
  const int64_t n = x.dim();
  for (size_t i = 0; i < dims.size(); ++i) inverse[size_t(dims[i] < 0 ? dims[i] + n : dims[i])] = int64_t(i);
  return record_one("permute", {x}, std::move(out), [inverse](const G& g) { return G{dt::permute(g[0], inverse)}; });
}
Variable unsqueeze(const Variable& x, int64_t dim) {
  return record_one("unsqueeze", {x}, dt::unsqueeze(x.data(), dim),
                    [s = x.shape()](const G& g) { return G{dt::reshape(g[0], s)}; });
}
Variable squeeze(const Variable& x, int64_t dim) {
  return record_one("squeeze", {x}, dt::squeeze(x.data(), dim),
                    [s = x.shape()](const G& g) { return G{dt::reshape(g[0], s)}; });
}
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  return record_one("narrow", {x}, dt::narrow(x.data(), d, start, length),
                    [d, start, length, s = x.shape()](const G& g) {
                      std::vector<DTensor> parts;
                      Shape before = s, after = s;
                      before[size_t(d)] = start;
                      after[size_t(d)] = s[size_t(d)] - start - length;
                      if (start > 0) parts.push_back(zeros_shaped_like(g[0], before));
                      parts.push_back(g[0]);
                      if (after[size_t(d)] > 0) parts.push_back(zeros_shaped_like(g[0], after));
                      return G{parts.size() == 1 ? g[0] : dt::cat(parts, d)};
                    });
}
Variable cat(const std::vector<Variable>& xs, int64_t dim) {
  DT_CHECK_ARG(!xs.empty(), "nn::cat: no tensors");
  std::vector<DTensor> data;
  std::vector<int64_t> sizes;
  const int64_t d = dim < 0 ? dim + xs[0].dim() : dim;
  for (const Variable& x : xs) {
    data.push_back(x.data());
    sizes.push_back(x.shape().at(size_t(d)));
  }
  return record_one("cat", xs, dt::cat(data, d), [sizes, d](const G& g) { return dt::split(g[0], sizes, d); });
}
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  return record("split", {x}, dt::split(x.data(), sizes, d), [d](const G& g) { return G{dt::cat(g, d)}; });
}
Variable tril(const Variable& x, int64_t diagonal) {
  return record_one("tril", {x}, dt::tril(x.data(), diagonal),
                    [diagonal](const G& g) { return G{dt::tril(g[0], diagonal)}; });
}
Variable triu(const Variable& x, int64_t diagonal) {
  return record_one("triu", {x}, dt::triu(x.data(), diagonal),
                    [diagonal](const G& g) { return G{dt::triu(g[0], diagonal)}; });
}

}  // namespace dt::nn
