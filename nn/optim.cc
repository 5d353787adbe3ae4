// Optimizers, clipping, schedule, data-parallel gradient averaging (nn/optim.h).
#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/memory_stats.h"
#include "core/trace.h"
#include "dtensor/ops.h"
#include "kernels/ops/optim.h"
#include "kernels/ops/reduction.h"
#include "nn/autograd.h"

namespace dt::nn {

Optimizer::Optimizer(std::vector<Variable> params)
    : Optimizer(std::vector<ParamGroup>{{"", std::move(params), 1.0, std::nullopt}}) {}

Optimizer::Optimizer(const std::vector<ParamGroup>& groups) {
  std::vector<const VariableImpl*> seen;
  for (const ParamGroup& g : groups) {
    DT_CHECK_ARG(g.lr_scale >= 0 && (!g.weight_decay || *g.weight_decay >= 0), "optimizer: group '", g.name,
                 "' needs lr_scale >= 0 and weight_decay >= 0");
    for (const Variable& p : g.params) {
      const size_t i = params_.size();
      DT_CHECK_ARG(p.impl() != nullptr && p.is_leaf() && p.requires_grad(), "optimizer: parameter ", i, " (", p.name(),
                   ") must be a leaf that requires grad");
      DT_CHECK_ARG(std::find(seen.begin(), seen.end(), p.impl()) == seen.end(), "optimizer: parameter ", p.name(),
                   " is in more than one group");
      seen.push_back(p.impl());
      params_.push_back(p);
      lr_scale_.push_back(g.lr_scale);
      weight_decay_.push_back(g.weight_decay);
    }
  }
}

void Optimizer::zero_grad() {
  for (const Variable& p : params_) p.zero_grad();
}

std::map<std::string, DTensor> Optimizer::state(const Variable& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? std::map<std::string, DTensor>{} : it->second.tensors;
}

Optimizer::State& Optimizer::state_for(const Variable& p, const std::vector<std::string>& names) {
  auto [it, fresh] = state_.try_emplace(p.impl());
  State& s = it->second;
  if (fresh) {
    s.spec = p.spec();
    s.mesh = p.mesh();
    s.shape = p.shape();
    MemoryKindScope scope(MemoryKind::kOptimizerState);
    // Zeros of the local shard's shape, where the shard lives (on the host for FSDP's cpu_offload of a CUDA run:
    // the step runs there).
    const Tensor& local = p.to_local();
    for (const std::string& n : names)
      s.tensors[n] = DTensor::from_local_unchecked(Tensor::zeros(local.shape(), local.dtype(), local.device()),
                                                   p.mesh(), p.spec(), p.shape());
    return s;
  }
  DT_CHECK_ARG(s.spec == p.spec() && s.mesh == p.mesh() && s.shape == p.shape(), "optimizer: parameter ",
               p.name().empty() ? std::string("(unnamed)") : p.name(), " was ", s.spec.to_string(), " ",
               shape_str(s.shape), " when its state was made and is now ", p.spec().to_string(), " ",
               shape_str(p.shape()), " (build the optimizer after sharding the model)");
  return s;
}

std::map<std::string, DTensor> Optimizer::ensure_state(const Variable& param) {
  DT_CHECK_ARG(std::any_of(params_.begin(), params_.end(), [&](const Variable& p) { return p.impl() == param.impl(); }),
               "optimizer: ", param.name().empty() ? std::string("(unnamed)") : param.name(),
               " is not one of its parameters");
  return state_for(param, state_names()).tensors;
}

int64_t Optimizer::state_step(const Variable& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? 0 : it->second.step;
}

void Optimizer::set_state_step(const Variable& param, int64_t step) {
  DT_CHECK_ARG(step >= 0, "optimizer: a state step must be >= 0, got ", step);
  ensure_state(param);
  state_.at(param.impl()).step = step;
}

namespace {

// The local gradient of p as a contiguous tensor of p's layout (a gradient accumulated by autograd already has it).
Tensor local_grad(const Variable& p) {
  DTensor g = p.grad();
  if (!(g.spec() == p.spec())) g = g.redistribute(p.spec());
  Tensor t = g.to_local();
  if (t.dtype() != p.dtype()) t = t.to(p.dtype());
  return t.contiguous();
}

// Accumulated in double (on the host: the gradient is copied there first when it lives on a GPU).
double sum_of_squares(const Tensor& t) {
  if (t.numel() == 0) return 0;
  Tensor x = t.to(Device::cpu()).contiguous();
  if (x.dtype() != DType::f32) x = x.to(DType::f64);
  const int64_t n = x.numel();
  double sq = 0;
  // Four independent sums: one dependent add per element would be latency-bound.
  auto run = [&](const auto* d) {
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) acc[k] += double(d[i + k]) * double(d[i + k]);
    for (; i < n; ++i) sq += double(d[i]) * double(d[i]);
    sq += (acc[0] + acc[1]) + (acc[2] + acc[3]);
  };
  if (x.dtype() == DType::f32)
    run(x.data<float>());
  else
    run(x.data<double>());
  return sq;
}

void check_payload(const Variable& p) {
  DT_CHECK_ARG(p.to_local().is_contiguous(), "optimizer: the local shard of ", p.name(), " is not contiguous");
}

}  // namespace

SGD::SGD(std::vector<Variable> params, SgdOptions o)
    : SGD(std::vector<ParamGroup>{{"", std::move(params), 1.0, std::nullopt}}, o) {}

SGD::SGD(const std::vector<ParamGroup>& groups, SgdOptions o) : Optimizer(groups), o_(o) {
  DT_CHECK_ARG(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, "SGD: lr, momentum and weight_decay must be >= 0");
  DT_CHECK_ARG(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0, dampening 0");
  lr_ = o.lr;
}

std::vector<std::string> SGD::state_names() const {
  return o_.momentum > 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
}

void SGD::step() {
  trace::Span span(trace::Category::kOptimizer, "SGD.step");
  NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    check_payload(p);
    kernels::SgdStep h{lr_of(i), o_.momentum, o_.dampening, weight_decay_of(i, o_.weight_decay), o_.nesterov, true};
    Tensor buf;
    if (o_.momentum > 0) {
      State& s = state_for(p, state_names());
      h.first = s.step == 0;
      ++s.step;
      buf = s.tensors["momentum_buffer"].to_local();
    }
    kernels::sgd_step(p.to_local(), local_grad(p), buf, h);
  }
}

AdamW::AdamW(std::vector<Variable> params, AdamWOptions o)
    : AdamW(std::vector<ParamGroup>{{"", std::move(params), 1.0, std::nullopt}}, o) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions o) : Optimizer(groups), o_(o) {
  DT_CHECK_ARG(
      o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
      "AdamW: need lr, eps, weight_decay >= 0 and betas in [0, 1), got lr ", o.lr, ", betas (", o.beta1, ", ", o.beta2,
      "), eps ", o.eps, ", weight_decay ", o.weight_decay);
  lr_ = o.lr;
}

void AdamW::step() {
  trace::Span span(trace::Category::kOptimizer, "AdamW.step");
  NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    check_payload(p);
    State& s = state_for(p, state_names());
    ++s.step;
    kernels::AdamWStep h{lr_of(i), o_.beta1, o_.beta2, o_.eps, weight_decay_of(i, o_.weight_decay), s.step};
    kernels::adamw_step(p.to_local(), local_grad(p), s.tensors["exp_avg"].to_local(),
                        s.tensors["exp_avg_sq"].to_local(), h);
  }
}

double grad_norm(const std::vector<Variable>& params) {
  // Group by (mesh, sharded mesh dims): one all-reduce per group and sharded mesh dim.
  struct Group {
    DeviceMesh mesh;
    std::vector<int64_t> dims;
    double sum = 0;
  };
  std::vector<Group> groups;
  for (const Variable& p : params) {
    const DTensor& g = p.grad();
    if (!g.defined() || !g.mesh().is_member()) continue;
    std::vector<int64_t> dims;
    for (int64_t m = 0; m < g.mesh().ndim(); ++m) {
      DT_CHECK_ARG(!is_partial(g.placements()[size_t(m)]), "grad_norm: the gradient of ", p.name(),
                   " is Partial on mesh dim ", m, " (reduce it first)");
      if (is_shard(g.placements()[size_t(m)])) dims.push_back(m);
    }
    const double sq = sum_of_squares(g.to_local());
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& gr) { return gr.mesh == g.mesh() && gr.dims == dims; });
    if (it == groups.end())
      groups.push_back(Group{g.mesh(), dims, sq});
    else
      it->sum += sq;
  }
  double total = 0;
  for (Group& gr : groups) {
    Tensor t = Tensor::full({1}, gr.sum, DType::f64).to(gr.mesh.device());
    for (int64_t m : gr.dims) gr.mesh.comm(m)->all_reduce(t, ReduceOp::kSum)->wait();
    total += t.to(Device::cpu()).data<double>()[0];
  }
  return std::sqrt(total);
}

double clip_grad_norm_(const std::vector<Variable>& params, double max_norm) {
  DT_CHECK_ARG(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  const double norm = grad_norm(params);
  clip_grads_to_norm_(params, max_norm, norm);
  return norm;
}

void clip_grads_to_norm_(const std::vector<Variable>& params, double max_norm, double norm) {
  DT_CHECK_ARG(max_norm > 0, "clip_grads_to_norm_: max_norm must be positive, got ", max_norm);
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1) return;
  for (const Variable& p : params) {
    if (!p.grad().defined()) continue;
    Tensor local = p.grad().to_local();
    local.copy_(kernels::mul_scalar(local, coef));
  }
}

void all_reduce_gradients(const std::vector<Variable>& params, const DeviceMesh& dp, ReduceOp op) {
  DT_CHECK_ARG(dp.defined() && dp.ndim() == 1, "all_reduce_gradients: the data-parallel mesh must be 1-d");
  if (!dp.is_member() || dp.size() == 1) return;
  // One flat buffer per (dtype, device): pack, all-reduce (average), unpack.
  std::map<std::pair<int, std::string>, std::vector<Tensor>> buckets;
  for (const Variable& p : params)
    if (p.grad().defined() && p.grad().to_local().numel() > 0) {
      const Tensor& t = p.grad().to_local();
      buckets[{int(t.dtype()), t.device().to_string()}].push_back(t);
    }
  for (auto& [key, ts] : buckets) {
    int64_t n = 0;
    for (const Tensor& t : ts) n += t.numel();
    Tensor flat;
    {
      MemoryKindScope scope(MemoryKind::kCommBuffers);
      flat = Tensor::empty({n}, ts[0].dtype(), ts[0].device());
    }
    int64_t off = 0;
    for (const Tensor& t : ts) {
      flat.narrow(0, off, t.numel()).copy_(t.reshape({t.numel()}));
      off += t.numel();
    }
    dp.comm(0)->all_reduce(flat, op)->wait();
    off = 0;
    for (const Tensor& t : ts) {
      Tensor dst = t;
      dst.copy_(flat.narrow(0, off, t.numel()).reshape(t.shape()));
      off += t.numel();
    }
  }
}

}  // namespace dt::nn
