// Variable's methods (the graph side lives in nn/autograd.cc).
#include "nn/variable.h"

#include "core/error.h"
#include "core/memory_stats.h"
#include "dtensor/ops.h"
#include "nn/autograd.h"
#include "nn/variable_impl.h"

namespace dt::nn {

Variable::Variable(DTensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->data = std::move(data);
  if (requires_grad) requires_grad_(true);
}

Variable Variable::make_output(DTensor data, std::shared_ptr<Node> grad_fn, int output_nr) {
  Variable v;
  v.impl_ = std::make_shared<VariableImpl>();
  v.impl_->data = std::move(data);
  v.impl_->requires_grad = grad_fn != nullptr;
  v.impl_->grad_fn = std::move(grad_fn);
  v.impl_->output_nr = output_nr;
  return v;
}

Variable Variable::from_impl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

bool Variable::defined() const { return impl_ != nullptr && impl_->data.defined(); }
bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }
bool Variable::is_leaf() const { return impl_ && !impl_->grad_fn; }
int Variable::output_nr() const { return impl_ ? impl_->output_nr : 0; }

const DTensor& Variable::data() const {
  DT_CHECK_ARG(impl_ != nullptr, "Variable: the handle is undefined (default-constructed)");
  return impl_->data;
}

void Variable::set_data(DTensor data) const {
  DT_CHECK_ARG(impl_ != nullptr, "Variable::set_data: the handle is undefined");
  impl_->data = std::move(data);
}

Variable& Variable::requires_grad_(bool on) {
  DT_CHECK_ARG(impl_ != nullptr, "Variable::requires_grad_: the handle is undefined");
  DT_CHECK_ARG(is_leaf(), "Variable::requires_grad_: only a leaf's flag can be set (", name().empty() ? "this" : name(),
               " was computed by ", impl_->grad_fn ? impl_->grad_fn->name() : "?", "; use detach() for a new leaf)");
  if (on)
    DT_CHECK_ARG(!impl_->data.defined() || is_floating(impl_->data.dtype()),
                 "Variable::requires_grad_: only floating tensors can require grad, this one is ",
                 dtype_name(impl_->data.dtype()));
  impl_->requires_grad = on;
  return *this;
}

const std::shared_ptr<Node>& Variable::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->grad_fn : none;
}

const DTensor& Variable::grad() const {
  static const DTensor none;
  return impl_ ? impl_->grad : none;
}

void Variable::set_grad(DTensor grad) const {
  DT_CHECK_ARG(impl_ != nullptr, "Variable::set_grad: the handle is undefined");
  DT_CHECK_ARG(!grad.defined() || grad.shape() == impl_->data.shape(), "Variable::set_grad: gradient shape ",
               shape_str(grad.shape()), " differs from the tensor's ", shape_str(impl_->data.shape()));
  impl_->grad = std::move(grad);
}

void Variable::zero_grad() const {
  if (impl_) impl_->grad = DTensor();
}

void Variable::deliver_grad(DTensor g) const {
  DT_CHECK_ARG(impl_ != nullptr && is_leaf(),
               "Variable::deliver_grad: ", impl_ ? "not a leaf" : "the handle is undefined");
  VariableImpl& leaf = *impl_;
  const DTensor& data = leaf.data;
  DT_CHECK_ARG(g.shape() == data.shape(), "backward: the gradient of ", leaf.name.empty() ? "a leaf" : leaf.name,
               " has shape ", shape_str(g.shape()), ", the tensor has ", shape_str(data.shape()));
  g = g.redistribute_like(data);
  if (g.dtype() != data.dtype()) g = to(g, data.dtype());
  leaf.grad = leaf.grad.defined() ? add(leaf.grad, g) : std::move(g);
  if (const auto& st = leaf.grad.to_local().storage()) st->set_memory_kind(MemoryKind::kGradients);
  Variable handle = *this;
  for (const auto& [id, hook] : leaf.post_accumulate_hooks) hook(handle);
}

void Variable::set_grad_sink(GradSink sink) const {
  DT_CHECK_ARG(impl_ != nullptr && is_leaf(),
               "Variable::set_grad_sink: ", impl_ ? "not a leaf" : "the handle is undefined");
  impl_->grad_sink = std::move(sink);
}

void Variable::backward(const DTensor& gradient, bool retain_graph) const {
  nn::backward({*this}, {gradient}, retain_graph);
}

Variable Variable::detach() const { return Variable(data(), false); }

void Variable::retain_grad() const {
  DT_CHECK_ARG(requires_grad(), "Variable::retain_grad: the tensor does not require grad");
  if (is_leaf() || impl_->retains_grad) return;
  impl_->retains_grad = true;
  std::weak_ptr<VariableImpl> weak = impl_;
  impl_->grad_fn->add_output_hook(impl_->output_nr, [weak](const DTensor& g) {
    if (auto impl = weak.lock()) impl->grad = impl->grad.defined() ? accumulate_grad(impl->grad, g) : g;
    return DTensor();
  });
}

int Variable::register_hook(GradHook hook) const {
  DT_CHECK_ARG(requires_grad(), "Variable::register_hook: the tensor does not require grad");
  if (!is_leaf()) return impl_->grad_fn->add_output_hook(impl_->output_nr, std::move(hook));
  const int id = impl_->next_hook_id++;
  impl_->hooks.emplace_back(id, std::move(hook));
  return id;
}

void Variable::remove_hook(int id) const {
  if (!impl_) return;
  if (!is_leaf()) {
    impl_->grad_fn->remove_output_hook(id);
    return;
  }
  std::erase_if(impl_->hooks, [id](const auto& h) { return h.first == id; });
}

int Variable::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  DT_CHECK_ARG(is_leaf() && requires_grad(),
               "Variable::register_post_accumulate_grad_hook: only a leaf that requires grad accumulates a gradient");
  const int id = impl_->next_hook_id++;
  impl_->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Variable::remove_post_accumulate_grad_hook(int id) const {
  if (impl_) std::erase_if(impl_->post_accumulate_hooks, [id](const auto& h) { return h.first == id; });
}

const std::string& Variable::name() const {
  static const std::string none;
  return impl_ ? impl_->name : none;
}

void Variable::set_name(std::string name) const {
  if (impl_) impl_->name = std::move(name);
}

}  // namespace dt::nn
