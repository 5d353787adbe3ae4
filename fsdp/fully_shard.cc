// fully_shard (fsdp/fully_shard.h): the FSDP engine's calls mapped onto module and autograd hooks.
//
// Note [FSDP hooks]
// Per module sharded by fully_shard (a "state"), with the root the first of them whose forward runs:
//   forward pre-hook    the root starts recording this forward's order; unshard + wait; set the Variables to the
//                       gathered values; prefetch: the explicit list, else the state after this one in the order
//                       the previous forward recorded (so at most this group and the next are gathered, beside the
//                       root's); cast floating inputs to param_dtype.
//   forward hook        reshard (not the root, whose backward starts at once, nor the last group of the forward
//                       order, whose backward comes next; not inside backward, where a checkpointed module
//                       recomputes); the Variables back to their shards; cast outputs.
//   backward pre-hook   the first one of a backward queues the end-of-backward callback; unshard + wait; prefetch
//                       the state before this one in the forward order (backward runs it in reverse).
//   gradient sink       (Variable::set_grad_sink) each parameter's complete gradient goes to the group; when every
//                       parameter that requires grad has one: reshard, then the group's reduction starts, after
//                       the previous group's reduction finished (one in flight: it overlaps this group's
//                       predecessors' backward, and the buffers of at most two reductions are alive).
//   end of backward     groups that did not get all their gradients (unused parameters) reduce what they got; every
//                       reduction is waited for; each parameter's grad() becomes its gradient shard (added to an
//                       existing one); its post-accumulate-grad hooks run; everything is resharded.
#include "fsdp/fully_shard.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/memory_stats.h"
#include "nn/autograd.h"
#include "nn/ops.h"

namespace dt::fsdp {

struct RootContext {
  std::vector<std::weak_ptr<FsdpState>> states;  // the root's subtree, pre-order
  std::vector<FsdpState*> order;                 // the forward order being recorded
  std::vector<FsdpState*> last_order;            // the last complete forward's order
  FsdpState* reducing = nullptr;                 // the state whose reduction is in flight
  bool backward_started = false;
};

class FsdpState : public std::enable_shared_from_this<FsdpState> {
 public:
  FsdpState(std::weak_ptr<nn::Module> module, std::string fqn_hint, std::vector<nn::Variable> vars,
            std::vector<std::string> names, const DeviceMesh& mesh, const FsdpOptions& options)
      : module_(std::move(module)),
        name_(std::move(fqn_hint)),
        vars_(std::move(vars)),
        group_(name_, std::move(names), datas(vars_), mesh, options),
        options_(options) {
    for (const nn::Variable& v : vars_)
      if (v.requires_grad()) ++expected_grads_;
  }

  static std::vector<DTensor> datas(const std::vector<nn::Variable>& vars) {
    std::vector<DTensor> d;
    for (const nn::Variable& v : vars) d.push_back(v.data());
    return d;
  }

  ParamGroup& group() { return group_; }
  const std::string& name() const { return name_; }
  const FsdpOptions& options() const { return options_; }
  const std::vector<nn::Variable>& variables() const { return vars_; }  // the parameters this group took

  void install_sinks() {
    std::weak_ptr<FsdpState> self = weak_from_this();
    for (size_t i = 0; i < vars_.size(); ++i) {
      vars_[i].set_data(group_.sharded_param(i));
      vars_[i].set_grad_sink([self, i](const DTensor& g) {
        if (auto s = self.lock()) s->on_grad(i, g);
      });
    }
  }

  // ---- lifecycle, with the Variables following the group ----
  void unshard_now() {
    group_.unshard(/*async=*/true);
    group_.wait_for_unshard();
    for (size_t i = 0; i < vars_.size(); ++i) vars_[i].set_data(group_.unsharded_param(i));
  }
  void prefetch() {
    if (group_.state() != ParamGroup::State::kUnsharded) group_.unshard(/*async=*/true);
  }
  void reshard(bool post_forward) {
    if (group_.state() == ParamGroup::State::kSharded || group_.state() == ParamGroup::State::kPostForward) return;
    group_.reshard(post_forward);
    for (size_t i = 0; i < vars_.size(); ++i) vars_[i].set_data(group_.sharded_param(i));
  }

  // ---- hooks ----
  std::optional<std::vector<nn::Variable>> pre_forward(const std::vector<nn::Variable>& inputs) {
    if (!ctx_) become_root();
    if (nn::in_backward()) {  // a checkpointed ancestor recomputes: only make sure the parameters are here
      unshard_now();
      return std::nullopt;
    }
    if (is_root_) ctx_->order.clear();
    if (std::find(ctx_->order.begin(), ctx_->order.end(), this) == ctx_->order.end()) ctx_->order.push_back(this);
    unshard_now();
    for (FsdpState* next : forward_prefetch_targets()) next->prefetch();
    const MixedPrecisionPolicy& mp = options_.mp_policy;
    if (!mp.param_dtype || !mp.cast_forward_inputs) return std::nullopt;
    return cast_floating(inputs, *mp.param_dtype);
  }

  std::optional<std::vector<nn::Variable>> post_forward(const std::vector<nn::Variable>& outputs) {
    if (!nn::in_backward()) {
      // The last group of the forward order keeps its parameters when a backward follows: its backward starts
      // right after, and freeing them would only gather them again at once (torchtitan sets this by hand).
      const bool last = !ctx_->last_order.empty() && ctx_->last_order.back() == this && nn::grad_enabled();
      const bool keep = is_root_ ? nn::grad_enabled()
                                 : last || (std::holds_alternative<bool>(options_.reshard_after_forward) &&
                                            !std::get<bool>(options_.reshard_after_forward));
      if (!keep) reshard(/*post_forward=*/!is_root_);
      if (is_root_) ctx_->last_order = ctx_->order;
    }
    const MixedPrecisionPolicy& mp = options_.mp_policy;
    if (!mp.output_dtype) return std::nullopt;
    return cast_floating(outputs, *mp.output_dtype);
  }

  void pre_backward() {
    if (!ctx_) return;
    if (!ctx_->backward_started) {
      ctx_->backward_started = true;
      std::weak_ptr<RootContext> ctx = ctx_;
      nn::queue_callback([ctx] {
        if (auto c = ctx.lock()) finish_backward(*c);
      });
    }
    got_ = 0;
    unshard_now();
    for (FsdpState* prev : backward_prefetch_targets()) prev->prefetch();
  }

  void on_grad(size_t i, const DTensor& g) {
    group_.accumulate_grad(i, g);
    if (++got_ == expected_grads_) post_backward();
  }

  void post_backward() {
    if (reshard_after_backward_) reshard(/*post_forward=*/false);
    if (!group_.requires_gradient_sync()) return;
    if (ctx_ && ctx_->reducing && ctx_->reducing != this) ctx_->reducing->finish_reduce();
    group_.reduce_grads();
    if (ctx_ && group_.reduce_pending())
      ctx_->reducing = this;
    else
      finish_reduce();
    reduced_ = true;
  }

  // Waits for this group's reduction and hands the gradient shards to the Variables.
  void finish_reduce() {
    group_.wait_for_reduce();
    if (ctx_ && ctx_->reducing == this) ctx_->reducing = nullptr;
    std::vector<DTensor> grads = group_.take_sharded_grads();
    for (size_t i = 0; i < vars_.size(); ++i) {
      if (!grads[i].defined()) continue;
      vars_[i].deliver_grad(std::move(grads[i]));
    }
  }

  static void finish_backward(RootContext& c) {
    std::vector<std::shared_ptr<FsdpState>> live;
    for (auto& w : c.states)
      if (auto s = w.lock()) live.push_back(s);
    // Groups that did not see every gradient (unused parameters) reduce what they got, in the same order on
    // every rank (the subtree's order).
    for (auto& s : live)
      if (s->got_ > 0 && !s->reduced_) s->post_backward();
    if (c.reducing) c.reducing->finish_reduce();
    for (auto& s : live) {
      if (s->reshard_after_backward_) s->reshard(/*post_forward=*/false);
      s->got_ = 0;
      s->reduced_ = false;
    }
    c.backward_started = false;
  }

  // ---- settings ----
  void set_requires_gradient_sync(bool on) { group_.set_requires_gradient_sync(on); }
  void set_reshard_after_backward(bool on) { reshard_after_backward_ = on; }
  void set_forward_prefetch(std::vector<std::weak_ptr<FsdpState>> s) {
    fwd_prefetch_ = std::move(s);
    explicit_fwd_ = true;
  }
  void set_backward_prefetch(std::vector<std::weak_ptr<FsdpState>> s) {
    bwd_prefetch_ = std::move(s);
    explicit_bwd_ = true;
  }
  std::shared_ptr<nn::Module> module() const { return module_.lock(); }

 private:
  void become_root();

  std::vector<FsdpState*> forward_prefetch_targets() {
    if (explicit_fwd_) return lock_all(fwd_prefetch_);
    return neighbour(ctx_->last_order, +1);
  }
  std::vector<FsdpState*> backward_prefetch_targets() {
    if (explicit_bwd_) return lock_all(bwd_prefetch_);
    return neighbour(ctx_->last_order, -1);
  }
  std::vector<FsdpState*> neighbour(const std::vector<FsdpState*>& order, int step) {
    auto it = std::find(order.begin(), order.end(), this);
    if (it == order.end()) return {};
    const auto pos = (it - order.begin()) + step;
    if (pos < 0 || pos >= int64_t(order.size())) return {};
    FsdpState* s = order[size_t(pos)];
    return s->is_root_ ? std::vector<FsdpState*>{} : std::vector<FsdpState*>{s};
  }
  static std::vector<FsdpState*> lock_all(const std::vector<std::weak_ptr<FsdpState>>& v) {
    std::vector<FsdpState*> out;
    for (auto& w : v)
      if (auto s = w.lock()) out.push_back(s.get());
    return out;
  }
  static std::vector<nn::Variable> cast_floating(const std::vector<nn::Variable>& xs, DType dtype) {
    std::vector<nn::Variable> out = xs;
    for (nn::Variable& x : out)
      if (x.defined() && is_floating(x.dtype()) && x.dtype() != dtype) x = nn::to(x, dtype);
    return out;
  }

  std::weak_ptr<nn::Module> module_;
  std::string name_;
  std::vector<nn::Variable> vars_;
  ParamGroup group_;
  FsdpOptions options_;
  int64_t expected_grads_ = 0;
  int64_t got_ = 0;  // gradients received in this backward
  bool reduced_ = false;
  bool reshard_after_backward_ = true;
  bool is_root_ = false;
  std::shared_ptr<RootContext> ctx_;
  std::vector<std::weak_ptr<FsdpState>> fwd_prefetch_, bwd_prefetch_;
  bool explicit_fwd_ = false, explicit_bwd_ = false;
};

namespace {

std::mutex g_registry_mu;
std::map<const nn::Module*, std::weak_ptr<FsdpState>> g_registry;

}  // namespace

std::shared_ptr<FsdpState> fsdp_state_of(const nn::Module& module) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_registry.find(&module);
  if (it == g_registry.end()) return nullptr;
  auto s = it->second.lock();
  if (!s) g_registry.erase(it);
  return s;
}

void FsdpState::become_root() {
  is_root_ = true;
  ctx_ = std::make_shared<RootContext>();
  auto m = module_.lock();
  DT_CHECK_ARG(m != nullptr, "fully_shard: the module was destroyed");
  for (auto& [fqn, sub] : m->named_modules()) {
    auto s = fsdp_state_of(*sub);
    if (!s) continue;
    DT_CHECK_ARG(s.get() == this || !s->is_root_, "fully_shard: module ", fqn, " ran its forward as a root before ",
                 "its parent ", name_, "; call the parent's forward only");
    s->ctx_ = ctx_;
    ctx_->states.push_back(s);
  }
}

FsdpModule fully_shard(const nn::ModulePtr& module, const DeviceMesh& mesh, const FsdpOptions& options) {
  DT_CHECK_ARG(module != nullptr, "fully_shard: the module is null");
  DT_CHECK_ARG(fsdp_state_of(*module) == nullptr, "fully_shard: module ", module->type_name(),
               " is already sharded (fully_shard applies once per module)");
  DeviceMesh fsdp_mesh = mesh;
  if (!options.mesh_dims.empty()) {
    DT_CHECK_ARG(options.mesh_dims.size() <= 2, "fully_shard: mesh_dims names 1 dim (FSDP) or 2 (HSDP: replicate, ",
                 "shard), got ", options.mesh_dims.size());
    for (const std::string& n : options.mesh_dims) {
      const auto& names = mesh.shape().names();
      DT_CHECK_ARG(std::find(names.begin(), names.end(), n) != names.end(), "fully_shard: the mesh ", mesh.to_string(),
                   " has no dim named '", n, "'");
    }
    fsdp_mesh = mesh.ndim() == int64_t(options.mesh_dims.size()) && mesh.shape().names() == options.mesh_dims
                    ? mesh
                    : mesh.sub_mesh(options.mesh_dims);
  }
  // The module's parameters that no fully_shard on a submodule took.
  std::vector<nn::Variable> taken;
  for (auto& [fqn, sub] : module->named_modules())
    if (auto s = fsdp_state_of(*sub)) taken.insert(taken.end(), s->variables().begin(), s->variables().end());
  std::vector<nn::Variable> vars;
  std::vector<std::string> names;
  for (auto& [fqn, p] : module->named_parameters()) {
    if (std::any_of(taken.begin(), taken.end(), [&](const nn::Variable& t) { return t.same(p); })) continue;
    vars.push_back(p);
    names.push_back(fqn);
  }
  const std::string label = module->type_name();
  auto state = std::make_shared<FsdpState>(module, label, vars, names, fsdp_mesh, options);
  state->install_sinks();
  std::weak_ptr<FsdpState> weak = state;
  module->register_forward_pre_hook(
      [state](nn::Module&, const std::vector<nn::Variable>& in) { return state->pre_forward(in); });
  module->register_forward_hook(
      [weak](nn::Module&, const std::vector<nn::Variable>&, const std::vector<nn::Variable>& out) {
        auto s = weak.lock();
        return s ? s->post_forward(out) : std::nullopt;
      });
  module->register_backward_pre_hook([weak](nn::Module&) {
    if (auto s = weak.lock()) s->pre_backward();
  });
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    g_registry[module.get()] = state;
  }
  return FsdpModule(state);
}

// ---- FsdpModule ----

void FsdpModule::unshard(bool async) {
  if (async) {
    state_->prefetch();
  } else {
    state_->unshard_now();
  }
}

void FsdpModule::reshard() { state_->reshard(/*post_forward=*/false); }

namespace {
template <typename F>
void for_subtree(FsdpState& s, bool recurse, F f) {
  auto m = s.module();
  if (!recurse || !m) {
    f(s);
    return;
  }
  for (auto& [fqn, sub] : m->named_modules())
    if (auto st = fsdp_state_of(*sub)) f(*st);
}
std::vector<std::weak_ptr<FsdpState>> states_of(const std::vector<nn::ModulePtr>& modules, const char* what) {
  std::vector<std::weak_ptr<FsdpState>> out;
  for (const nn::ModulePtr& m : modules) {
    DT_CHECK_ARG(m != nullptr, what, ": a module is null");
    auto s = fsdp_state_of(*m);
    DT_CHECK_ARG(s != nullptr, what, ": module ", m->type_name(), " is not sharded by fully_shard");
    out.push_back(s);
  }
  return out;
}
}  // namespace

void FsdpModule::set_requires_gradient_sync(bool on, bool recurse) {
  for_subtree(*state_, recurse, [on](FsdpState& s) { s.set_requires_gradient_sync(on); });
}

void FsdpModule::set_reshard_after_backward(bool on, bool recurse) {
  for_subtree(*state_, recurse, [on](FsdpState& s) { s.set_reshard_after_backward(on); });
}

void FsdpModule::set_modules_to_forward_prefetch(const std::vector<nn::ModulePtr>& modules) {
  state_->set_forward_prefetch(states_of(modules, "set_modules_to_forward_prefetch"));
}

void FsdpModule::set_modules_to_backward_prefetch(const std::vector<nn::ModulePtr>& modules) {
  state_->set_backward_prefetch(states_of(modules, "set_modules_to_backward_prefetch"));
}

ParamGroup& FsdpModule::param_group() { return state_->group(); }

}  // namespace dt::fsdp
