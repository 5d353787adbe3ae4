// View and data-movement rules. Note [reshape groups] explains when a reshape keeps a Shard.
#include "dtensor/ops/view.h"

#include <algorithm>
#include <numeric>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/shape_ops.h"

namespace dt {
namespace ops::detail {
namespace {

// Note [reshape groups]
// A reshape (row-major, numel > 0) splits the input and output dims into consecutive groups of equal products,
// e.g. [4, 6] -> [4, 2, 3] is {4}->{4}, {6}->{2, 3}. Within a group, only its leading dim (the first of size != 1)
// can be sharded on either side: then a rank's block covers the contiguous range [b * inner, e * inner) of the
// group's flattened index, where [b, e) is its range of the leading dim and `inner` the product of the group's
// later dims. The Shard survives the reshape exactly when these flat ranges agree for every rank (checked with the
// layout math, uneven and nested shards included); a rank's local reshape then yields exactly its output block.
struct Group {
  std::vector<int64_t> in, out;
  int64_t in_lead = -1, out_lead = -1;
  int64_t in_inner = 1, out_inner = 1;  // product of the group's dims after the leading one
};

std::vector<Group> reshape_groups(const Shape& in, const Shape& out) {
  std::vector<Group> groups;
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    Group g;
    int64_t pi = 1, pj = 1;
    if (i < in.size()) pi *= in[i], g.in.push_back(int64_t(i++));
    if (j < out.size()) pj *= out[j], g.out.push_back(int64_t(j++));
    while (pi != pj) {
      if (pi < pj && i < in.size()) {
        pi *= in[i];
        g.in.push_back(int64_t(i++));
      } else if (pj < pi && j < out.size()) {
        pj *= out[j];
        g.out.push_back(int64_t(j++));
      } else {
        break;
      }
    }
    auto lead = [](const Shape& s, const std::vector<int64_t>& dims, int64_t* inner) {
      int64_t l = -1;
      for (int64_t d : dims) {
        if (l >= 0)
          *inner *= s[size_t(d)];
        else if (s[size_t(d)] != 1)
          l = d;
      }
      return l;
    };
    g.in_lead = lead(in, g.in, &g.in_inner);
    g.out_lead = lead(out, g.out, &g.out_inner);
    groups.push_back(std::move(g));
  }
  return groups;
}

// Strategies shared by the data-movement ops: R -> R and P(op) -> P(op) for every op (on every input and output).
std::vector<DimStrategy> movement_base(size_t n_in, size_t n_out) {
  std::vector<DimStrategy> v{replicate_all(n_in, n_out)};
  for (ReduceOp op : kAllReduceOps)
    v.push_back(DimStrategy{std::vector<Placement>(n_out, P(op)), std::vector<Placement>(n_in, P(op))});
  return v;
}

OpRule reshape_rule() {
  OpRule r;
  r.name = "reshape";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const Shape& shape = s.params.get_ints("shape");
    DT_CHECK_ARG(shape_numel(shape) == shape_numel(s.inputs[0].shape), "dt::reshape: cannot reshape ",
                 shape_str(s.inputs[0].shape), " (", shape_numel(s.inputs[0].shape), " elements) to ",
                 shape_str(shape));
    return std::vector<OutputMeta>{{shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    if (shape_numel(s.inputs[0].shape) == 0) return v;
    for (const Group& g : reshape_groups(s.inputs[0].shape, out[0].shape))
      if (g.in_lead >= 0 && g.out_lead >= 0) v.push_back(strategy({S(g.out_lead)}, {S(g.in_lead)}));
    return v;
  };
  r.validate = [](const OpSchema& s, const std::vector<OutputMeta>& out, const OpStrategy& st) {
    const Shape& in_shape = s.inputs[0].shape;
    const Shape& out_shape = out[0].shape;
    if (shape_numel(in_shape) == 0) return true;
    const std::vector<Group> groups = reshape_groups(in_shape, out_shape);
    for (int64_t k = 0; k < s.mesh.numel(); ++k) {
      const std::vector<int64_t> coord = s.mesh.coordinate_at_index(k);
      const std::vector<IndexRange> a = local_ranges(in_shape, s.mesh, st.inputs[0], coord);
      const std::vector<IndexRange> b = local_ranges(out_shape, s.mesh, st.outputs[0], coord);
      for (const Group& g : groups) {
        if (g.in_lead < 0 || g.out_lead < 0) continue;
        const IndexRange& x = a[size_t(g.in_lead)];
        const IndexRange& y = b[size_t(g.out_lead)];
        if (x.begin * g.in_inner != y.begin * g.out_inner || x.end * g.in_inner != y.end * g.out_inner) return false;
      }
    }
    return true;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{reshape_rowmajor(in[0], c.output_local_shape(0))};
  };
  return r;
}

OpRule permute_rule() {
  OpRule r;
  r.name = "permute";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const std::vector<int64_t>& dims = s.params.get_ints("dims");
    const Shape& x = s.inputs[0].shape;
    std::vector<int64_t> sorted = dims;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> want(x.size());
    std::iota(want.begin(), want.end(), 0);
    DT_CHECK_ARG(sorted == want, "dt::permute: dims ", shape_str(dims), " are not a permutation of the ", x.size(),
                 " dims of ", shape_str(x));
    Shape out;
    for (int64_t d : dims) out.push_back(x[size_t(d)]);
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const std::vector<int64_t>& dims = s.params.get_ints("dims");
    for (size_t j = 0; j < dims.size(); ++j) v.push_back(strategy({S(int64_t(j))}, {S(dims[j])}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].permute(c.params().get_ints("dims"))};
  };
  return r;
}

OpRule unsqueeze_rule() {
  OpRule r;
  r.name = "unsqueeze";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const int64_t dim = s.params.get_int("dim");
    Shape out = s.inputs[0].shape;
    DT_CHECK_ARG(dim >= 0 && dim <= int64_t(out.size()), "dt::unsqueeze: dim ", dim, " out of range");
    out.insert(out.begin() + dim, 1);
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const int64_t dim = s.params.get_int("dim");
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d >= dim ? d + 1 : d)}, {S(d)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].unsqueeze(c.params().get_int("dim"))};
  };
  return r;
}

OpRule squeeze_rule() {
  OpRule r;
  r.name = "squeeze";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const Shape& x = s.inputs[0].shape;
    const std::vector<int64_t>& dims = s.params.get_ints("dims");
    Shape out;
    for (int64_t d = 0; d < int64_t(x.size()); ++d) {
      const bool drop = std::find(dims.begin(), dims.end(), d) != dims.end();
      DT_CHECK_ARG(!drop || x[size_t(d)] == 1, "dt::squeeze: dim ", d, " of ", shape_str(x), " has size ",
                   x[size_t(d)]);
      if (!drop) out.push_back(x[size_t(d)]);
    }
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const std::vector<int64_t>& dims = s.params.get_ints("dims");
    int64_t o = 0;
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;  // a dropped dim must be whole
      v.push_back(strategy({S(o++)}, {S(d)}));
    }
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{reshape_rowmajor(in[0], c.output_local_shape(0))};
  };
  return r;
}

OpRule narrow_rule() {
  OpRule r;
  r.name = "narrow";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const Shape& x = s.inputs[0].shape;
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(x.size()));
    const int64_t start = s.params.get_int("start"), length = s.params.get_int("length");
    DT_CHECK_ARG(!x.empty() && start >= 0 && length >= 0 && start <= x[size_t(dim)] && length <= x[size_t(dim)] - start,
                 "dt::narrow: start ", start, ", length ", length, " is out of range for dim ", dim, " of ",
                 shape_str(x));
    Shape out = x;
    out[size_t(dim)] = length;
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const int64_t dim = wrap(s, s.params.get_int("dim"), s.inputs[0].ndim());
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    return std::vector<Tensor>{
        in[0].narrow(dim < 0 ? dim + in[0].dim() : dim, c.params().get_int("start"), c.params().get_int("length"))};
  };
  return r;
}

OpRule cat_rule() {
  OpRule r;
  r.name = "cat";
  r.meta = [](const OpSchema& s) {
    DT_CHECK_ARG(!s.inputs.empty(), "dt::cat: no tensors given");
    for (size_t i = 0; i < s.inputs.size(); ++i) check_defined_input(s, i, "tensor " + std::to_string(i));
    const Shape& first = s.inputs[0].shape;
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(first.size()));
    DT_CHECK_ARG(!first.empty(), "dt::cat: 0-d tensors cannot be concatenated");
    Shape out = first;
    out[size_t(dim)] = 0;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Shape& t = s.inputs[i].shape;
      check_same_dtype(s, 0, i, {});
      bool ok = t.size() == first.size();
      for (size_t d = 0; ok && d < t.size(); ++d) ok = int64_t(d) == dim || t[d] == first[d];
      DT_CHECK_ARG(ok, "dt::cat: tensor ", i, " has shape ", shape_str(t), " but tensor 0 has ", shape_str(first),
                   " (they must agree except along dim ", dim, ")");
      out[size_t(dim)] += t[size_t(dim)];
    }
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const size_t n = s.inputs.size();
    std::vector<DimStrategy> v = movement_base(n, 1);
    const int64_t dim = wrap(s, s.params.get_int("dim"), s.inputs[0].ndim());
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(DimStrategy{{S(d)}, std::vector<Placement>(n, S(d))});
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    return std::vector<Tensor>{kernels::cat(in, dim < 0 ? dim + in[0].dim() : dim)};
  };
  return r;
}

OpRule split_rule() {
  OpRule r;
  r.name = "split";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const Shape& x = s.inputs[0].shape;
    DT_CHECK_ARG(!x.empty(), "dt::split: a 0-d tensor cannot be split");
    const int64_t dim = wrap(s, s.params.get_int("dim"), int64_t(x.size()));
    const std::vector<int64_t>& sizes = s.params.get_ints("sizes");
    int64_t total = 0;
    for (int64_t v : sizes) {
      DT_CHECK_ARG(v >= 0, "dt::split: negative size in ", shape_str(sizes));
      total += v;
    }
    DT_CHECK_ARG(total == x[size_t(dim)], "dt::split: sizes ", shape_str(sizes), " add up to ", total, " but dim ", dim,
                 " of ", shape_str(x), " has ", x[size_t(dim)]);
    std::vector<OutputMeta> out;
    for (int64_t v : sizes) {
      Shape o = x;
      o[size_t(dim)] = v;
      out.push_back({o, s.inputs[0].dtype});
    }
    return out;
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& outs) {
    const size_t n = outs.size();
    std::vector<DimStrategy> v = movement_base(1, n);
    const int64_t dim = wrap(s, s.params.get_int("dim"), s.inputs[0].ndim());
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(DimStrategy{std::vector<Placement>(n, S(d)), {S(d)}});
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const int64_t dim = c.params().get_int("dim");
    return in[0].split_with_sizes(c.params().get_ints("sizes"), dim < 0 ? dim + in[0].dim() : dim);
  };
  return r;
}

OpRule triangle_rule(const char* name, bool lower) {
  OpRule r;
  r.name = name;
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    DT_CHECK_ARG(s.inputs[0].ndim() >= 2, "dt::", s.op, ": x needs at least 2 dims, got ",
                 shape_str(s.inputs[0].shape));
    return std::vector<OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    // Zeroing is the same on every rank, so every Partial op passes; any dim may be sharded (the diagonal is
    // shifted by the block's offset).
    std::vector<DimStrategy> v = movement_base(1, 1);
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [lower](const OpCall& c, const std::vector<Tensor>& in) {
    const std::vector<IndexRange> ranges = c.input_ranges(0);
    const size_t n = ranges.size();
    const int64_t diag = c.params().get_int("diagonal") + ranges[n - 2].begin - ranges[n - 1].begin;
    return std::vector<Tensor>{lower ? kernels::tril(in[0], diag) : kernels::triu(in[0], diag)};
  };
  return r;
}

// expand: input dim i lines up with output dim i + lead. A kept dim keeps its sharding; an expanded (size-1) dim
// and a new leading dim may come out Shard from a Replicate input (each rank materializes its block).
OpRule expand_rule() {
  OpRule r;
  r.name = "expand";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    const Shape& x = s.inputs[0].shape;
    const Shape& shape = s.params.get_ints("shape");
    DT_CHECK_ARG(shape.size() >= x.size(), "dt::expand: the target ", shape_str(shape), " has fewer dims than x ",
                 shape_str(x));
    const size_t lead = shape.size() - x.size();
    for (size_t d = 0; d < shape.size(); ++d) {
      DT_CHECK_ARG(shape[d] >= 0, "dt::expand: invalid size ", shape[d], " in ", shape_str(shape));
      if (d >= lead)
        DT_CHECK_ARG(x[d - lead] == shape[d] || x[d - lead] == 1, "dt::expand: x ", shape_str(x),
                     " cannot be expanded to ", shape_str(shape), " (dim ", d - lead, " has size ", x[d - lead],
                     ", not 1)");
    }
    return std::vector<OutputMeta>{{shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>& out) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const Shape& x = s.inputs[0].shape;
    const Shape& shape = out[0].shape;
    const int64_t lead = int64_t(shape.size() - x.size());
    for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
      const bool kept = d >= lead && x[size_t(d - lead)] == shape[size_t(d)];
      v.push_back(strategy({S(d)}, {kept ? S(d - lead) : R()}));
    }
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].expand(c.output_local_shape(0)).contiguous()};
  };
  return r;
}

OpRule stack_rule() {
  OpRule r;
  r.name = "stack";
  r.meta = [](const OpSchema& s) {
    DT_CHECK_ARG(!s.inputs.empty(), "dt::stack: no tensors given");
    const Shape& first = s.inputs[0].shape;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      check_defined_input(s, i, "tensor " + std::to_string(i));
      check_same_dtype(s, 0, i, {});
      DT_CHECK_ARG(s.inputs[i].shape == first, "dt::stack: tensor ", i, " has shape ", shape_str(s.inputs[i].shape),
                   " but tensor 0 has ", shape_str(first), " (stack needs equal shapes)");
    }
    const int64_t dim = s.params.get_int("dim");
    DT_CHECK_ARG(dim >= 0 && dim <= int64_t(first.size()), "dt::stack: dim ", dim, " out of range");
    Shape out = first;
    out.insert(out.begin() + dim, int64_t(s.inputs.size()));
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const size_t n = s.inputs.size();
    std::vector<DimStrategy> v = movement_base(n, 1);
    const int64_t dim = s.params.get_int("dim");
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      v.push_back(DimStrategy{{S(d >= dim ? d + 1 : d)}, std::vector<Placement>(n, S(d))});
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::stack(in, c.params().get_int("dim"))};
  };
  return r;
}

// slice(x, dim, start, end, step) with 0 <= start <= end <= size (the public call clamps as Python does), step >= 1:
// the view of elements start, start + step, ... below end along dim. slice_backward scatters grad into zeros.
int64_t slice_length(int64_t start, int64_t end, int64_t step) {
  return end <= start ? 0 : (end - start + step - 1) / step;
}

// The strided view of `t` (a tensor of the full extent along dim) taking the slice.
Tensor slice_view(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Shape shape = t.shape(), strides = t.strides();
  shape[size_t(dim)] = slice_length(start, end, step);
  const int64_t offset = t.offset() + (shape[size_t(dim)] == 0 ? 0 : start * strides[size_t(dim)]);
  strides[size_t(dim)] *= step;
  return t.as_strided(shape, strides, offset);
}

void check_slice(const OpSchema& s, const Shape& full) {
  const int64_t dim = s.params.get_int("dim"), start = s.params.get_int("start"), end = s.params.get_int("end"),
                step = s.params.get_int("step");
  DT_CHECK_ARG(!full.empty() && dim >= 0 && dim < int64_t(full.size()), "dt::", s.op, ": dim ", dim,
               " is out of range for ", shape_str(full));
  DT_CHECK_ARG(step >= 1, "dt::", s.op, ": step must be >= 1, got ", step);
  DT_CHECK_ARG(start >= 0 && start <= end && end <= full[size_t(dim)], "dt::", s.op, ": [", start, ", ", end,
               ") is out of range for dim ", dim, " of ", shape_str(full));
}

OpRule slice_rule() {
  OpRule r;
  r.name = "slice";
  r.input_names = {"x"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "x");
    check_slice(s, s.inputs[0].shape);
    Shape out = s.inputs[0].shape;
    const int64_t dim = s.params.get_int("dim");
    out[size_t(dim)] = slice_length(s.params.get_int("start"), s.params.get_int("end"), s.params.get_int("step"));
    return std::vector<OutputMeta>{{out, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    std::vector<DimStrategy> v = movement_base(1, 1);
    const int64_t dim = s.params.get_int("dim");
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const OpParams& p = c.params();
    return std::vector<Tensor>{
        slice_view(in[0], p.get_int("dim"), p.get_int("start"), p.get_int("end"), p.get_int("step")).contiguous()};
  };
  return r;
}

OpRule slice_backward_rule() {
  OpRule r;
  r.name = "slice_backward";
  r.input_names = {"grad"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad");
    const Shape& input = s.params.get_ints("input_shape");
    check_slice(s, input);
    Shape want = input;
    const int64_t dim = s.params.get_int("dim");
    want[size_t(dim)] = slice_length(s.params.get_int("start"), s.params.get_int("end"), s.params.get_int("step"));
    DT_CHECK_ARG(s.inputs[0].shape == want, "dt::slice_backward: grad must have the slice's shape ", shape_str(want),
                 ", got ", shape_str(s.inputs[0].shape));
    return std::vector<OutputMeta>{{input, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    // The zeros are alike on every rank: sum, avg, max and min of partial grads pass (not product).
    std::vector<DimStrategy> v{replicate_all(1, 1)};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
      v.push_back(strategy({P(op)}, {P(op)}));
    const int64_t dim = s.params.get_int("dim");
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d)
      if (d != dim) v.push_back(strategy({S(d)}, {S(d)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const OpParams& p = c.params();
    Tensor out = Tensor::zeros(c.output_local_shape(0), in[0].dtype(), in[0].device());
    slice_view(out, p.get_int("dim"), p.get_int("start"), p.get_int("end"), p.get_int("step")).copy_(in[0]);
    return std::vector<Tensor>{out};
  };
  return r;
}

}  // namespace

void register_view_rules(std::vector<OpRule>& rules) {
  rules.push_back(reshape_rule());
  rules.push_back(permute_rule());
  rules.push_back(unsqueeze_rule());
  rules.push_back(squeeze_rule());
  rules.push_back(narrow_rule());
  rules.push_back(cat_rule());
  rules.push_back(split_rule());
  rules.push_back(triangle_rule("tril", true));
  rules.push_back(triangle_rule("triu", false));
  rules.push_back(expand_rule());
  rules.push_back(stack_rule());
  rules.push_back(slice_rule());
  rules.push_back(slice_backward_rule());
}

}  // namespace ops::detail

namespace {
void check(const DTensor& x, const char* op) { DT_CHECK_ARG(x.defined(), "dt::", op, ": x is undefined"); }
}  // namespace

DTensor reshape(const DTensor& x, const Shape& shape) {
  check(x, "reshape");
  Shape resolved = shape;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DT_CHECK_ARG(infer < 0, "dt::reshape: only one dim may be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      DT_CHECK_ARG(shape[i] >= 0, "dt::reshape: invalid size ", shape[i], " in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DT_CHECK_ARG(known > 0 && x.numel() % known == 0, "dt::reshape: cannot infer the -1 in ", shape_str(shape), " for ",
                 shape_str(x.shape()), " (", x.numel(), " elements)");
    resolved[size_t(infer)] = x.numel() / known;
  }
  return ops::dispatch_one("reshape", {x}, ops::OpParams().set("shape", resolved));
}

DTensor view(const DTensor& x, const Shape& shape) { return reshape(x, shape); }

DTensor flatten(const DTensor& x, int64_t start_dim, int64_t end_dim) {
  check(x, "flatten");
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten start_dim");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten end_dim");
  DT_CHECK_ARG(s <= e, "dt::flatten: start_dim ", s, " is after end_dim ", e);
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t p = 1;
  for (int64_t d = s; d <= e; ++d) p *= x.shape()[size_t(d)];
  out.push_back(p);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
}

DTensor unflatten(const DTensor& x, int64_t dim, const Shape& sizes) {
  check(x, "unflatten");
  const int64_t d = wrap_dim(dim, x.dim(), "unflatten dim");
  Shape out(x.shape().begin(), x.shape().begin() + d);
  out.insert(out.end(), sizes.begin(), sizes.end());
  out.insert(out.end(), x.shape().begin() + d + 1, x.shape().end());
  // A -1 among `sizes` is resolved by reshape against the whole shape.
  return reshape(x, out);
}

DTensor permute(const DTensor& x, const std::vector<int64_t>& dims) {
  check(x, "permute");
  std::vector<int64_t> norm;
  for (int64_t d : dims) norm.push_back(wrap_dim(d, x.dim(), "permute dim"));
  return ops::dispatch_one("permute", {x}, ops::OpParams().set("dims", norm));
}

DTensor transpose(const DTensor& x, int64_t dim0, int64_t dim1) {
  check(x, "transpose");
  std::vector<int64_t> dims(size_t(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  if (x.dim() == 0) return x;
  std::swap(dims[size_t(wrap_dim(dim0, x.dim(), "transpose dim0"))],
            dims[size_t(wrap_dim(dim1, x.dim(), "transpose dim1"))]);
  return ops::dispatch_one("permute", {x}, ops::OpParams().set("dims", dims));
}

DTensor unsqueeze(const DTensor& x, int64_t dim) {
  check(x, "unsqueeze");
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze dim");
  return ops::dispatch_one("unsqueeze", {x}, ops::OpParams().set("dim", d));
}

DTensor squeeze(const DTensor& x, int64_t dim) {
  check(x, "squeeze");
  if (x.dim() == 0) return x;
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze dim");
  std::vector<int64_t> dims;
  if (x.shape()[size_t(d)] == 1) dims.push_back(d);  // torch: squeezing a dim of another size is a no-op
  return ops::dispatch_one("squeeze", {x}, ops::OpParams().set("dims", dims));
}

DTensor squeeze(const DTensor& x) {
  check(x, "squeeze");
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[size_t(d)] == 1) dims.push_back(d);
  return ops::dispatch_one("squeeze", {x}, ops::OpParams().set("dims", dims));
}

DTensor narrow(const DTensor& x, int64_t dim, int64_t start, int64_t length) {
  check(x, "narrow");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "narrow dim");
  if (start < 0 && x.dim() > 0) start += x.shape()[size_t(d)];
  return ops::dispatch_one("narrow", {x}, ops::OpParams().set("dim", d).set("start", start).set("length", length));
}

DTensor cat(const std::vector<DTensor>& tensors, int64_t dim) {
  return ops::dispatch_one("cat", tensors, ops::OpParams().set("dim", dim));
}

std::vector<DTensor> split(const DTensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check(x, "split");
  return ops::dispatch("split", {x}, ops::OpParams().set("sizes", sizes).set("dim", dim));
}

std::vector<DTensor> split(const DTensor& x, int64_t split_size, int64_t dim) {
  check(x, "split");
  DT_CHECK_ARG(x.dim() > 0, "dt::split: a 0-d tensor cannot be split");
  DT_CHECK_ARG(split_size > 0, "dt::split: split_size must be positive, got ", split_size);
  const int64_t n = x.shape()[size_t(wrap_dim(dim, x.dim(), "split dim"))];
  std::vector<int64_t> sizes;
  for (int64_t b = 0; b < n; b += split_size) sizes.push_back(std::min(split_size, n - b));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

DTensor tril(const DTensor& x, int64_t diagonal) {
  return ops::dispatch_one("tril", {x}, ops::OpParams().set("diagonal", diagonal));
}
DTensor triu(const DTensor& x, int64_t diagonal) {
  return ops::dispatch_one("triu", {x}, ops::OpParams().set("diagonal", diagonal));
}

DTensor expand(const DTensor& x, const Shape& shape) {
  check(x, "expand");
  DT_CHECK_ARG(shape.size() >= size_t(x.dim()), "dt::expand: the target ", shape_str(shape), " has fewer dims than x ",
               shape_str(x.shape()));
  Shape resolved = shape;
  const size_t lead = shape.size() - size_t(x.dim());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != -1) continue;
    DT_CHECK_ARG(d >= lead, "dt::expand: -1 is not allowed for the new leading dim ", d, " of ", shape_str(shape));
    resolved[d] = x.shape()[d - lead];
  }
  return ops::dispatch_one("expand", {x}, ops::OpParams().set("shape", resolved));
}

DTensor stack(const std::vector<DTensor>& tensors, int64_t dim) {
  DT_CHECK_ARG(!tensors.empty(), "dt::stack: no tensors given");
  check(tensors[0], "stack");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack dim");
  return ops::dispatch_one("stack", tensors, ops::OpParams().set("dim", d));
}

namespace {
// Python slice bounds: negative start/end count from the end, then both are clamped to [0, size].
void normalize_slice(int64_t size, int64_t* start, int64_t* end) {
  auto fix = [size](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + size : v, 0, size); };
  *start = fix(*start);
  *end = std::max(*start, fix(*end));
}
}  // namespace

DTensor slice(const DTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check(x, "slice");
  DT_CHECK_ARG(x.dim() > 0, "dt::slice: a 0-d tensor cannot be sliced");
  DT_CHECK_ARG(step >= 1, "dt::slice: step must be >= 1, got ", step);
  const int64_t d = wrap_dim(dim, x.dim(), "slice dim");
  normalize_slice(x.shape()[size_t(d)], &start, &end);
  return ops::dispatch_one("slice", {x},
                           ops::OpParams().set("dim", d).set("start", start).set("end", end).set("step", step));
}

DTensor slice_backward(const DTensor& grad, const Shape& input_shape, int64_t dim, int64_t start, int64_t end,
                       int64_t step) {
  check(grad, "slice_backward");
  DT_CHECK_ARG(!input_shape.empty(), "dt::slice_backward: input_shape must have at least 1 dim");
  DT_CHECK_ARG(step >= 1, "dt::slice_backward: step must be >= 1, got ", step);
  const int64_t d = wrap_dim(dim, int64_t(input_shape.size()), "slice_backward dim");
  normalize_slice(input_shape[size_t(d)], &start, &end);
  return ops::dispatch_one("slice_backward", {grad},
                           ops::OpParams()
                               .set("input_shape", input_shape)
                               .set("dim", d)
                               .set("start", start)
                               .set("end", end)
                               .set("step", step));
}

}  // namespace dt
