// Reduction rules: a sharded reduced dim becomes Partial; mean divides by the global count (Note [exact mean]).
#include "dtensor/ops/reduction.h"

#include <algorithm>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"

namespace dt {
namespace ops::detail {
namespace {

// Note [exact mean]
// The mean over an unevenly sharded dim is NOT the average of the shards' means (PyTorch's Partial(avg) shortcut,
// pytorch/pytorch#162692): shards of 3 and 2 rows weigh differently. Every rank instead sums its block and divides
// by the global number of reduced elements, giving a P(sum) whose reduction is the exact mean.

struct ReduceDims {
  std::vector<bool> reduced;  // per input dim
  std::vector<int64_t> out;   // input dim -> output dim (-1: reduced without keepdim)
  Shape out_shape;
  std::vector<int64_t> dims;  // the reduced dims, sorted
};

ReduceDims reduce_dims(const OpSchema& s, const std::vector<int64_t>& given, bool keepdim) {
  const Shape& x = s.inputs[0].shape;
  const int64_t n = int64_t(x.size());
  ReduceDims r;
  r.reduced.assign(size_t(n), given.empty());
  for (int64_t d : given) {
    const int64_t w = wrap(s, d, n);
    DT_CHECK_ARG(n > 0, "dt::", s.op, ": a 0-d tensor has no dim ", d);
    DT_CHECK_ARG(!r.reduced[size_t(w)], "dt::", s.op, ": dim ", w, " is listed twice in ", shape_str(given));
    r.reduced[size_t(w)] = true;
  }
  for (int64_t d = 0; d < n; ++d) {
    if (r.reduced[size_t(d)]) r.dims.push_back(d);
    if (r.reduced[size_t(d)] && !keepdim) {
      r.out.push_back(-1);
      continue;
    }
    r.out.push_back(int64_t(r.out_shape.size()));
    r.out_shape.push_back(r.reduced[size_t(d)] ? 1 : x[size_t(d)]);
  }
  return r;
}

enum class Kind { kSum, kMean, kMax, kMin };

ReduceOp partial_of(Kind k) {
  return k == Kind::kMax ? ReduceOp::kMax : k == Kind::kMin ? ReduceOp::kMin : ReduceOp::kSum;
}

void check_nonempty(const OpSchema& s, const ReduceDims& r) {
  for (int64_t d : r.dims)
    DT_CHECK_ARG(s.inputs[0].shape[size_t(d)] > 0, "dt::", s.op, ": cannot reduce over dim ", d, " of ",
                 shape_str(s.inputs[0].shape), ", which is empty (no identity for this reduction)");
}

OpRule reduce_rule(const char* name, Kind kind) {
  OpRule r;
  r.name = name;
  r.input_names = {"x"};
  r.meta = [kind](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const ReduceDims rd = reduce_dims(s, s.params.get_ints("dims"), s.params.get_bool("keepdim"));
    DType dt = s.inputs[0].dtype;
    if (kind == Kind::kSum && !is_floating(dt)) dt = DType::i64;
    if (kind == Kind::kMean) check_floating(s, 0, "x");
    if (kind == Kind::kMax || kind == Kind::kMin) check_nonempty(s, rd);
    return std::vector<OutputMeta>{{rd.out_shape, dt}};
  };
  r.strategies = [kind](const OpSchema& s, const std::vector<OutputMeta>&) {
    const ReduceDims rd = reduce_dims(s, s.params.get_ints("dims"), s.params.get_bool("keepdim"));
    std::vector<DimStrategy> v{replicate_all(1, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      v.push_back(strategy({rd.reduced[size_t(d)] ? P(partial_of(kind)) : S(rd.out[size_t(d)])}, {S(d)}));
    if (s.inputs[0].dtype == DType::b8) return v;
    switch (kind) {
      case Kind::kSum:
      case Kind::kMean:  // linear
        v.push_back(strategy({P(ReduceOp::kSum)}, {P(ReduceOp::kSum)}));
        v.push_back(strategy({P(ReduceOp::kAvg)}, {P(ReduceOp::kAvg)}));
        break;
      case Kind::kMax:
        v.push_back(strategy({P(ReduceOp::kMax)}, {P(ReduceOp::kMax)}));
        break;
      case Kind::kMin:
        v.push_back(strategy({P(ReduceOp::kMin)}, {P(ReduceOp::kMin)}));
        break;
    }
    return v;
  };
  r.compute = [kind](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const std::vector<int64_t>& dims = c.params().get_ints("dims");
    const bool keepdim = c.params().get_bool("keepdim");
    const ReduceDims rd = reduce_dims(c.schema, dims, keepdim);
    bool sharded_reduced = false, empty_local = false;
    for (int64_t d : rd.dims) {
      sharded_reduced = sharded_reduced || !c.mesh_dims_sharding(0, d).empty();
      empty_local = empty_local || x.size(d) == 0;
    }
    switch (kind) {
      case Kind::kSum:
        return std::vector<Tensor>{kernels::sum(x, dims, keepdim)};
      case Kind::kMean: {
        if (!sharded_reduced) return std::vector<Tensor>{kernels::mean(x, dims, keepdim)};
        int64_t count = 1;  // Note [exact mean]
        for (int64_t d : rd.dims) count *= c.schema.inputs[0].shape[size_t(d)];
        const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
        Tensor s = kernels::sum(x.to(acc), dims, keepdim);
        return std::vector<Tensor>{kernels::div_scalar(s, double(count)).to(x.dtype())};
      }
      case Kind::kMax:
      case Kind::kMin: {
        // An empty block (uneven sharding) contributes the identity of the Partial op.
        if (empty_local)
          return std::vector<Tensor>{identity_tensor(c.output_local_shape(0), x.dtype(), x.device(), partial_of(kind))};
        return std::vector<Tensor>{kind == Kind::kMax ? kernels::amax(x, dims, keepdim)
                                                      : kernels::amin(x, dims, keepdim)};
      }
    }
    return std::vector<Tensor>{};
  };
  return r;
}

// max/min with a dim (values + indices) and argmax/argmin: the reduced dim must be whole.
OpRule index_reduce_rule(const char* name, bool is_max, bool with_values) {
  OpRule r;
  r.name = name;
  r.input_names = {"x"};
  auto dims_of = [](const OpSchema& s) -> std::vector<int64_t> {
    if (s.params.has("dim")) return {s.params.get_int("dim")};
    return {};
  };
  r.meta = [dims_of, with_values](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const bool keepdim = s.params.get_bool("keepdim");
    const ReduceDims rd = reduce_dims(s, dims_of(s), keepdim);
    check_nonempty(s, rd);
    const Shape& out = rd.out_shape;
    std::vector<OutputMeta> v;
    if (with_values) v.push_back({out, s.inputs[0].dtype});
    v.push_back({out, DType::i64});
    return v;
  };
  r.strategies = [dims_of](const OpSchema& s, const std::vector<OutputMeta>& outs) {
    const size_t n_out = outs.size();
    std::vector<DimStrategy> v{replicate_all(1, n_out)};
    if (!s.params.has("dim")) return v;  // a flat index needs the whole tensor
    const ReduceDims rd = reduce_dims(s, dims_of(s), s.params.get_bool("keepdim"));
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) {
      if (rd.reduced[size_t(d)]) continue;
      v.push_back(strategy(std::vector<Placement>(n_out, S(rd.out[size_t(d)])), {S(d)}));
    }
    return v;
  };
  r.compute = [is_max, with_values](const OpCall& c, const std::vector<Tensor>& in) {
    const bool keepdim = c.params().get_bool("keepdim");
    if (with_values) {
      const int64_t dim = c.params().get_int("dim");
      kernels::ValuesIndices vi = is_max ? kernels::max(in[0], dim, keepdim) : kernels::min(in[0], dim, keepdim);
      return std::vector<Tensor>{vi.values, vi.indices};
    }
    std::optional<int64_t> dim;
    if (c.params().has("dim")) dim = c.params().get_int("dim");
    return std::vector<Tensor>{is_max ? kernels::argmax(in[0], dim, keepdim) : kernels::argmin(in[0], dim, keepdim)};
  };
  return r;
}

}  // namespace

void register_reduction_rules(std::vector<OpRule>& rules) {
  rules.push_back(reduce_rule("sum", Kind::kSum));
  rules.push_back(reduce_rule("mean", Kind::kMean));
  rules.push_back(reduce_rule("amax", Kind::kMax));
  rules.push_back(reduce_rule("amin", Kind::kMin));
  rules.push_back(index_reduce_rule("max_dim", true, true));
  rules.push_back(index_reduce_rule("min_dim", false, true));
  rules.push_back(index_reduce_rule("argmax", true, false));
  rules.push_back(index_reduce_rule("argmin", false, false));
}

}  // namespace ops::detail

namespace {
DTensor reduce(const char* op, const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return ops::dispatch_one(op, {x}, ops::OpParams().set("dims", dims).set("keepdim", keepdim));
}
DValuesIndices index_reduce(const char* op, const DTensor& x, int64_t dim, bool keepdim) {
  std::vector<DTensor> out = ops::dispatch(op, {x}, ops::OpParams().set("dim", dim).set("keepdim", keepdim));
  return DValuesIndices{out[0], out[1]};
}
DTensor arg_reduce(const char* op, const DTensor& x, std::optional<int64_t> dim, bool keepdim) {
  ops::OpParams p;
  if (dim) p.set("dim", *dim);
  p.set("keepdim", keepdim);
  return ops::dispatch_one(op, {x}, p);
}
}  // namespace

DTensor sum(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("sum", x, dims, keepdim);
}
DTensor mean(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("mean", x, dims, keepdim);
}
DTensor amax(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("amax", x, dims, keepdim);
}
DTensor amin(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("amin", x, dims, keepdim);
}
DTensor max(const DTensor& x) { return reduce("amax", x, {}, false); }
DTensor min(const DTensor& x) { return reduce("amin", x, {}, false); }
DValuesIndices max(const DTensor& x, int64_t dim, bool keepdim) { return index_reduce("max_dim", x, dim, keepdim); }
DValuesIndices min(const DTensor& x, int64_t dim, bool keepdim) { return index_reduce("min_dim", x, dim, keepdim); }
DTensor argmax(const DTensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce("argmax", x, dim, keepdim);
}
DTensor argmin(const DTensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce("argmin", x, dim, keepdim);
}

}  // namespace dt
