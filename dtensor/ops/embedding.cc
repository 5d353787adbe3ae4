// embedding and its backward. A row-sharded table (a sharded vocabulary) masks the ids this rank does not own, as
// the class-sharded logits of loss parallel do (loss.cc).
#include "dtensor/ops/embedding.h"

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/loss.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/reduction.h"
#include "kernels/ops/shape_ops.h"

namespace dt {
namespace ops::detail {
namespace {

using kernels::CompareOp;

OpRule embedding_rule() {
  OpRule r;
  r.name = "embedding";
  r.input_names = {"ids", "weight"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "ids");
    check_defined_input(s, 1, "weight");
    check_integer(s, 0, "ids");
    const Shape& w = s.inputs[1].shape;
    DT_CHECK_ARG(w.size() == 2, "dt::embedding: weight must be [num_embeddings, dim], got ", shape_str(w));
    Shape out = s.inputs[0].shape;
    out.push_back(w[1]);
    return std::vector<OutputMeta>{{out, s.inputs[1].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t n = s.inputs[0].ndim();
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < n; ++d) v.push_back(strategy({S(d)}, {S(d), R()}));
    v.push_back(strategy({S(n)}, {R(), S(1)}));
    v.push_back(strategy({P()}, {R(), S(0)}));
    for (ReduceOp op : kAllReduceOps) v.push_back(strategy({P(op)}, {R(), P(op)}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& ids = in[0];
    const Tensor& w = in[1];
    if (c.mesh_dims_sharding(1, 0).empty()) return std::vector<Tensor>{kernels::embedding(w, ids)};
    // Row-sharded table: this rank owns rows [begin, end) of the global table.
    const int64_t vocab = c.schema.inputs[1].shape[0];
    Tensor id64 = ids.to(DType::i64);
    const int64_t bad = count_true(outside(id64, 0, vocab));
    DT_CHECK_ARG(bad == 0, "dt::embedding: ", bad, " ids are outside [0, ", vocab, ") (the table has ", vocab,
                 " rows)");
    const IndexRange rows = c.input_ranges(1)[0];
    if (rows.empty() || ids.numel() == 0)
      return std::vector<Tensor>{Tensor::zeros(c.output_local_shape(0), w.dtype(), w.device())};
    LocalRows local = local_rows(id64, rows.begin, rows.size());
    Tensor out = kernels::embedding(w, local.ids);
    return std::vector<Tensor>{kernels::masked_fill(out, local.foreign.unsqueeze(-1), 0)};
  };
  return r;
}

// Inputs (grad_out [..., D], ids) -> grad_weight [V, D] (V = param "num_embeddings"), the forward's strategies
// read backwards: ids sharded -> P(sum); a column-sharded table -> S(1); a row-sharded table (forward P(sum)
// output, so a Replicate gradient) -> S(0), each rank adding only the ids of its rows.
OpRule embedding_backward_rule() {
  OpRule r;
  r.name = "embedding_backward";
  r.input_names = {"grad_out", "ids"};
  r.meta = [](const OpSchema& s) {
    check_defined_input(s, 0, "grad_out");
    check_defined_input(s, 1, "ids");
    check_integer(s, 1, "ids");
    const Shape& g = s.inputs[0].shape;
    DT_CHECK_ARG(!g.empty() && Shape(g.begin(), g.end() - 1) == s.inputs[1].shape, "dt::embedding_backward: grad_out ",
                 shape_str(g), " does not match ids ", shape_str(s.inputs[1].shape));
    return std::vector<OutputMeta>{{Shape{s.params.get_int("num_embeddings"), g.back()}, s.inputs[0].dtype}};
  };
  r.strategies = [](const OpSchema& s, const std::vector<OutputMeta>&) {
    const int64_t n = s.inputs[1].ndim();
    std::vector<DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < n; ++d) v.push_back(strategy({P()}, {S(d), S(d)}));
    v.push_back(strategy({S(1)}, {S(n), R()}));
    v.push_back(strategy({S(0)}, {R(), R()}));
    v.push_back(strategy({P()}, {P(), R()}));
    return v;
  };
  r.compute = [](const OpCall& c, const std::vector<Tensor>& in) {
    const Tensor& g = in[0];
    const Tensor& ids = in[1];
    const IndexRange rows = c.output_ranges(0)[0];
    if (rows.begin == 0 && rows.end == c.outputs[0].shape[0])
      return std::vector<Tensor>{kernels::embedding_backward(g, ids, rows.size())};
    LocalRows local = local_rows(ids, rows.begin, rows.size());
    Tensor gm = kernels::masked_fill(g, local.foreign.unsqueeze(-1), 0);
    return std::vector<Tensor>{kernels::embedding_backward(gm, local.ids, rows.size())};
  };
  return r;
}

}  // namespace

void register_embedding_rules(std::vector<OpRule>& rules) {
  rules.push_back(embedding_rule());
  rules.push_back(embedding_backward_rule());
}

}  // namespace ops::detail

DTensor embedding(const DTensor& ids, const DTensor& weight) { return ops::dispatch_one("embedding", {ids, weight}); }

}  // namespace dt
