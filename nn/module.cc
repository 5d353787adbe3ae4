// Module (nn/module.h).
//
// Note [Module hook order]
// A call m(inputs) runs: the forward pre-hooks in registration order (each may replace the inputs); when backward
// hooks are registered and an input requires grad, an identity node over the inputs (its post-hook runs the
// backward hooks once this module's input gradients are computed); forward (under checkpointing: without recording,
// and one node whose backward recomputes it); the forward hooks (each may replace the outputs); then, when backward
// pre-hooks are registered, a pre-hook on every output's node that runs them once, before the first of those nodes
// runs in backward. A module whose inputs need no gradient runs its backward hooks from an end-of-backward callback
// queued by its backward pre-hook (parameters' gradients are complete by then).
#include "nn/module.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/memory_stats.h"
#include "core/splitmix.h"
#include "dtensor/factory.h"
#include "dtensor/ops.h"
#include "nn/autograd.h"
#include "nn/variable_impl.h"

namespace dt::nn {

uint64_t parameter_seed(uint64_t seed, const std::string& fqn) {
  uint64_t h = splitmix64(seed ^ 0x9e3779b97f4a7c15ull);
  for (unsigned char c : fqn) h = splitmix64(h ^ c);
  return h;
}

// ---- registration ----

void Module::check_new_name(const std::string& name) const {
  DT_CHECK_ARG(!name.empty() && name.find('.') == std::string::npos, type_name_,
               ": a name must be non-empty and contain no '.', got '", name, "'");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& e) {
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, ParamSlot>)
        return e.name == name;
      else
        return e.first == name;
    });
  };
  DT_CHECK_ARG(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": the name '", name,
               "' is already registered");
}

Variable Module::register_parameter(const std::string& name, Shape shape, Init init, DType dtype) {
  check_new_name(name);
  DT_CHECK_ARG(is_floating(dtype), type_name_, ".", name, ": parameters must be floating, got ", dtype_name(dtype));
  ParamSlot s;
  s.name = name;
  s.var = Variable(DTensor(), false);
  s.var.impl()->requires_grad = true;
  s.shape = std::move(shape);
  s.dtype = dtype;
  s.init = init;
  params_.push_back(std::move(s));
  return params_.back().var;
}

Variable Module::register_parameter(const std::string& name, Variable param) {
  check_new_name(name);
  DT_CHECK_ARG(param.impl() != nullptr && param.is_leaf(), type_name_, ".", name, ": a parameter must be a leaf");
  ParamSlot s;
  s.name = name;
  s.var = param;
  s.owner = false;
  if (param.defined()) {
    s.shape = param.shape();
    s.dtype = param.dtype();
  }
  params_.push_back(std::move(s));
  return param;
}

void Module::register_buffer(const std::string& name, DTensor value) {
  check_new_name(name);
  buffers_.emplace_back(name, std::move(value));
}

void Module::add_child(const std::string& name, ModulePtr child) {
  check_new_name(name);
  DT_CHECK_ARG(child != nullptr, type_name_, ": child '", name, "' is null");
  children_.emplace_back(name, std::move(child));
}

Module::ParamSlot& Module::slot(const std::string& name) {
  return const_cast<ParamSlot&>(static_cast<const Module*>(this)->slot(name));
}

const Module::ParamSlot& Module::slot(const std::string& name) const {
  for (const ParamSlot& s : params_)
    if (s.name == name) return s;
  std::string have;
  for (const ParamSlot& s : params_) have += (have.empty() ? "" : ", ") + s.name;
  DT_THROW(InvalidArgument, type_name_, " has no parameter '", name, "' (it has: ", have.empty() ? "none" : have, ")");
}

// ---- inspection ----

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out,
                                std::vector<const VariableImpl*>& seen) const {
  for (const ParamSlot& s : params_) {
    if (std::find(seen.begin(), seen.end(), s.var.impl()) != seen.end()) continue;
    seen.push_back(s.var.impl());
    out.emplace_back(prefix + s.name, s.var);
  }
}

int64_t Module::declared_numel() const {
  int64_t n = 0;
  std::vector<const VariableImpl*> seen;
  std::function<void(const Module&)> walk = [&](const Module& m) {
    for (const ParamSlot& s : m.params_) {
      if (std::find(seen.begin(), seen.end(), s.var.impl()) != seen.end()) continue;
      seen.push_back(s.var.impl());
      n += shape_numel(s.shape);
    }
    for (const auto& [name, child] : m.children_) walk(*child);
  };
  walk(*this);
  return n;
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Variable>> out;
  std::vector<const VariableImpl*> seen;
  collect_parameters("", out, seen);
  if (!recurse) return out;
  // Depth-first in registration order: this module's own first, then each child's subtree (torch's order).
  std::vector<std::pair<std::string, const Module*>> todo;
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, child] : m.children_) {
      child->collect_parameters(prefix + name + ".", out, seen);
      walk(prefix + name + ".", *child);
    }
  };
  walk("", *this);
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) const {
  std::vector<Variable> out;
  for (auto& [n, v] : named_parameters(recurse)) out.push_back(v);
  return out;
}

std::vector<std::pair<std::string, DTensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, DTensor>> out(buffers_.begin(), buffers_.end());
  if (!recurse) return out;
  for (const auto& [name, child] : children_)
    for (auto& [n, b] : child->named_buffers(true)) out.emplace_back(name + "." + n, b);
  return out;
}

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, ModulePtr>>& out) {
  for (auto& [name, child] : children_) {
    const std::string fqn = prefix.empty() ? name : prefix + "." + name;
    out.emplace_back(fqn, child);
    child->collect_modules(fqn, out);
  }
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules() {
  std::vector<std::pair<std::string, ModulePtr>> out{{"", shared_from_this()}};
  collect_modules("", out);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

ModulePtr Module::get_submodule(const std::string& fqn) {
  ModulePtr m = shared_from_this();
  if (fqn.empty()) return m;
  std::stringstream ss(fqn);
  std::string part, path;
  while (std::getline(ss, part, '.')) {
    auto it = std::find_if(m->children_.begin(), m->children_.end(), [&](const auto& c) { return c.first == part; });
    DT_CHECK_ARG(it != m->children_.end(), type_name_, ": no submodule '", fqn, "' (", path.empty() ? "the root" : path,
                 " has no child '", part, "')");
    path += (path.empty() ? "" : ".") + part;
    m = it->second;
  }
  return m;
}

Variable Module::get_parameter(const std::string& fqn) {
  const size_t dot = fqn.rfind('.');
  ModulePtr m = dot == std::string::npos ? shared_from_this() : get_submodule(fqn.substr(0, dot));
  return m->slot(dot == std::string::npos ? fqn : fqn.substr(dot + 1)).var;
}

std::string Module::describe() const {
  std::ostringstream os;
  std::function<void(const Module&, const std::string&, int)> walk = [&](const Module& m, const std::string& name,
                                                                         int depth) {
    os << std::string(size_t(2 * depth), ' ') << (name.empty() ? "" : name + ": ") << m.type_name_ << "\n";
    for (const ParamSlot& s : m.params_) {
      os << std::string(size_t(2 * depth + 2), ' ') << s.name << " " << shape_str(s.shape);
      if (s.var.defined())
        os << " " << s.var.spec().to_string();
      else if (!s.placements.empty())
        os << " (to be made " << ShardingSpec(s.placements).to_string() << ")";
      else
        os << " (not materialized)";
      if (!s.owner) os << " (tied)";
      os << "\n";
    }
    for (const auto& [n, c] : m.children_) walk(*c, n, depth + 1);
  };
  walk(*this, "", 0);
  return os.str();
}

// ---- placement and initialization ----

void Module::set_parameter_layout(const std::string& name, const DeviceMesh& mesh, std::vector<Placement> placements) {
  ParamSlot& s = slot(name);
  DT_CHECK_ARG(int64_t(placements.size()) == mesh.ndim(), type_name_, ".", name, ": ", placements.size(),
               " placements for a ", mesh.ndim(), "-d mesh");
  s.mesh = mesh;
  s.placements = placements;
  if (s.var.defined()) {
    const DTensor& d = s.var.data();
    MemoryKindScope scope(MemoryKind::kParameters);  // the redistributed value is the parameter from now on
    s.var.set_data(d.mesh() == mesh ? d.redistribute(placements) : d.redistribute(mesh, placements));
  }
}

const DeviceMesh& Module::parameter_mesh(const std::string& name) const { return slot(name).mesh; }

void Module::set_parameter_init(const std::string& name, Init init) {
  ParamSlot& s = slot(name);
  DT_CHECK_ARG(!s.var.defined(), type_name_, ".", name, ": set_parameter_init after the parameter was materialized");
  if (init.kind == Init::Kind::kTruncNormal)
    DT_CHECK_ARG(init.b >= 0 && init.lo < init.hi, type_name_, ".", name,
                 ": a truncated normal needs std >= 0 and lo < hi, got std ", init.b, " and [", init.lo, ", ", init.hi,
                 "]");
  s.init = init;
}

void Module::materialize_own(const std::string& prefix, const DeviceMesh& mesh, uint64_t seed,
                             std::optional<DType> dtype, bool fill) {
  for (ParamSlot& s : params_) {
    if (!s.owner || s.var.defined()) continue;
    const DeviceMesh& m = s.mesh.defined() ? s.mesh : mesh;
    std::vector<Placement> p =
        s.placements.empty() ? std::vector<Placement>(size_t(m.ndim()), Replicate{}) : s.placements;
    FactoryOptions o;
    o.dtype = dtype.value_or(s.dtype);
    o.seed = parameter_seed(seed, prefix + s.name);
    DTensor d;
    if (!fill) {
      d = dt::empty(s.shape, m, p, o);
    } else
      switch (s.init.kind) {
        case Init::Kind::kZeros:
          d = dt::zeros(s.shape, m, p, o);
          break;
        case Init::Kind::kOnes:
          d = dt::ones(s.shape, m, p, o);
          break;
        case Init::Kind::kNormal:
          d = dt::randn(s.shape, m, p, o, s.init.a, s.init.b);
          break;
        case Init::Kind::kUniform:
          d = dt::rand(s.shape, m, p, o, s.init.a, s.init.b);
          break;
        case Init::Kind::kTruncNormal:
          d = dt::trunc_normal(s.shape, m, p, o, s.init.a, s.init.b, s.init.lo, s.init.hi);
          break;
      }
    s.var.set_data(std::move(d));
    s.var.set_name(prefix + s.name);
  }
  for (auto& [name, child] : children_) child->materialize_own(prefix + name + ".", mesh, seed, dtype, fill);
}

void Module::materialize(const DeviceMesh& mesh, uint64_t seed, std::optional<DType> dtype) {
  DT_CHECK_ARG(mesh.defined(), type_name_, "::materialize: the mesh is undefined");
  MemoryKindScope scope(MemoryKind::kParameters);
  materialize_own("", mesh, seed, dtype, /*fill=*/true);
}

void Module::materialize_empty(const DeviceMesh& mesh, std::optional<DType> dtype) {
  DT_CHECK_ARG(mesh.defined(), type_name_, "::materialize_empty: the mesh is undefined");
  MemoryKindScope scope(MemoryKind::kParameters);
  materialize_own("", mesh, 0, dtype, /*fill=*/false);
}

bool Module::materialized() const {
  for (const auto& [n, v] : named_parameters())
    if (!v.defined()) return false;
  return true;
}

// ---- state ----

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, v] : named_parameters()) {
    DT_CHECK_ARG(v.defined(), type_name_, "::state_dict: parameter ", n, " is not materialized");
    out.emplace_back(n, v.data());
  }
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::string> missing, unexpected;
  auto params = named_parameters();
  for (const auto& [name, value] : state) {
    auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
    if (it == params.end()) {
      bool is_buffer = false;
      for (auto& [bn, b] : named_buffers()) is_buffer |= bn == name;
      if (!is_buffer) unexpected.push_back(name);
      continue;
    }
    const Variable& p = it->second;
    DT_CHECK_ARG(p.defined(), "load_state_dict: parameter ", name, " is not materialized");
    DT_CHECK_ARG(value.shape() == p.shape(), "load_state_dict: ", name, " has shape ", shape_str(p.shape()),
                 ", the state gives ", shape_str(value.shape()));
    DTensor v = value.redistribute_like(p.data());
    if (v.dtype() != p.dtype()) v = dt::to(v, p.dtype());
    Tensor local = p.to_local();
    local.copy_(v.to_local());
  }
  for (auto& [n, p] : params)
    if (std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == n; }) == state.end())
      missing.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string m, u;
    for (auto& s : missing) m += " " + s;
    for (auto& s : unexpected) u += " " + s;
    DT_THROW(InvalidArgument, "load_state_dict: missing keys:", m.empty() ? " none" : m,
             "; unexpected keys:", u.empty() ? " none" : u);
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, v] : named_parameters()) v.zero_grad();
}

// ---- hooks ----

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  forward_pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}
int Module::register_forward_hook(ForwardHook hook) {
  forward_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}
int Module::register_backward_pre_hook(BackwardHook hook) {
  backward_pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}
int Module::register_backward_hook(BackwardHook hook) {
  backward_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}
void Module::remove_hook(int id) {
  auto drop = [id](auto& v) { std::erase_if(v, [id](const auto& h) { return h.first == id; }); };
  drop(forward_pre_hooks_);
  drop(forward_hooks_);
  drop(backward_pre_hooks_);
  drop(backward_hooks_);
}

std::vector<Variable> ModuleList::forward(const std::vector<Variable>&) {
  DT_THROW(InvalidArgument, "ModuleList has no forward: call its elements");
}

// ---- the call path ----

namespace {

struct BackwardHookState {
  bool pre_fired = false;
  bool post_fired = false;
};

}  // namespace

std::vector<Variable> Module::call_forward(const std::vector<Variable>& inputs) {
  if (!activation_checkpointing_ || !grad_enabled()) return forward(inputs);
  // Activation checkpointing: run without recording; one node whose backward recomputes the forward with
  // recording on (from detached inputs) and runs a backward through it. The parameters' gradients are
  // accumulated by that inner backward; the node returns the inputs' gradients.
  // The random-number counters of the subtree as the forward found them (rng_counter), for the recompute.
  std::vector<std::pair<std::weak_ptr<Module>, uint64_t>> rng;
  for (auto& [n, m] : named_modules())
    if (uint64_t* c = m->rng_counter()) rng.emplace_back(m, *c);
  std::vector<Variable> outputs;
  {
    NoGradGuard no_grad;
    outputs = forward(inputs);
  }
  std::vector<DTensor> out_data;
  for (const Variable& o : outputs) out_data.push_back(o.data());
  std::vector<Variable> edges = inputs;
  for (auto& [n, p] : named_parameters()) edges.push_back(p);
  const size_t n_in = inputs.size();
  std::weak_ptr<Module> self = weak_from_this();
  return record("activation_checkpoint(" + type_name_ + ")", edges, out_data,
                [self, inputs, n_in, n_edges = edges.size(), rng](const std::vector<DTensor>& grads) {
                  auto m = self.lock();
                  DT_CHECK_ARG(m != nullptr, "activation checkpointing: the module was destroyed before its backward");
                  std::vector<Variable> detached;
                  for (const Variable& in : inputs) {
                    Variable d = in.defined() ? in.detach() : Variable();
                    if (in.requires_grad()) d.requires_grad_(true);
                    detached.push_back(d);
                  }
                  std::vector<Variable> outs;
                  {
                    // Replay the forward's counters, then put back the ones later calls have advanced them to.
                    std::vector<uint64_t> now;
                    for (const auto& [w, c] : rng) {
                      auto r = w.lock();
                      uint64_t* counter = r ? r->rng_counter() : nullptr;
                      now.push_back(counter ? *counter : 0);
                      if (counter) *counter = c;
                    }
                    EnableGradGuard grad;
                    outs = m->forward(detached);
                    for (size_t i = 0; i < rng.size(); ++i)
                      if (auto r = rng[i].first.lock())
                        if (uint64_t* counter = r->rng_counter()) *counter = now[i];
                  }
                  std::vector<Variable> roots;
                  std::vector<DTensor> root_grads;
                  for (size_t i = 0; i < outs.size(); ++i)
                    if (outs[i].requires_grad()) {
                      roots.push_back(outs[i]);
                      root_grads.push_back(grads[i]);
                    }
                  if (!roots.empty()) backward(roots, root_grads);
                  std::vector<DTensor> result(n_edges);
                  for (size_t i = 0; i < n_in; ++i)
                    if (detached[i].defined()) result[i] = detached[i].grad();
                  return result;
                });
}

std::vector<Variable> Module::operator()(const std::vector<Variable>& given) {
  std::vector<Variable> inputs = given;
  for (const auto& [id, hook] : forward_pre_hooks_)
    if (auto r = hook(*this, inputs)) inputs = std::move(*r);
  if (backward_pre_hooks_.empty() && backward_hooks_.empty()) {  // the common case: nothing to attach
    std::vector<Variable> outputs = call_forward(inputs);
    for (const auto& [id, hook] : forward_hooks_)
      if (auto r = hook(*this, inputs, outputs)) outputs = std::move(*r);
    return outputs;
  }
  auto state = std::make_shared<BackwardHookState>();
  std::weak_ptr<Module> self = weak_from_this();
  auto run_post = [self, state] {
    auto m = self.lock();
    if (!m || state->post_fired) return;
    state->post_fired = true;
    for (const auto& [id, hook] : m->backward_hooks_) hook(*m);
  };
  bool post_attached = false;
  if (!backward_hooks_.empty() && any_requires_grad(inputs)) {
    std::vector<DTensor> data;
    for (const Variable& v : inputs) data.push_back(v.defined() ? v.data() : DTensor());
    std::vector<Variable> wrapped =
        record("backward_hook(" + type_name_ + ")", inputs, data, [](const std::vector<DTensor>& g) { return g; });
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].requires_grad()) inputs[i] = wrapped[i];
    for (const Variable& w : wrapped)
      if (w.grad_fn()) {
        w.grad_fn()->add_post_hook(run_post);
        post_attached = true;
        break;
      }
  }
  std::vector<Variable> outputs = call_forward(inputs);
  for (const auto& [id, hook] : forward_hooks_)
    if (auto r = hook(*this, inputs, outputs)) outputs = std::move(*r);
  if ((!backward_pre_hooks_.empty() || (!backward_hooks_.empty() && !post_attached)) && grad_enabled()) {
    auto run_pre = [self, state, post_attached, run_post] {
      auto m = self.lock();
      if (!m || state->pre_fired) return;
      state->pre_fired = true;
      for (const auto& [id, hook] : m->backward_pre_hooks_) hook(*m);
      if (!post_attached && !m->backward_hooks_.empty()) queue_callback(run_post);
    };
    for (const Variable& o : outputs)
      if (o.grad_fn()) o.grad_fn()->add_pre_hook(run_pre);
  }
  return outputs;
}

}  // namespace dt::nn
