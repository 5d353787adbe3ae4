// dtensor._torch_bridge: the autograd hooks and gradient hand-offs of dtensor.torch's compiled hook bodies
// (dtensor/_fsdp_hooks.c) as libtorch C++, built against the installed torch (Note [The libtorch bridge] in
// dtensor/torch/_bridge.py says when and how). It exports one table (_torch_bridge.h) as the capsule `table`.
#include "_torch_bridge.h"

#include <ATen/DLConvertor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <exception>
#include <memory>
#include <utility>

namespace {

// The GIL, held for a scope (autograd runs hooks with it released).
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// A failed callback (the GIL held): its Python exception reaches backward()'s caller.
[[noreturn]] void raise_callback_error() {
  python_error error;
  error.persist();
  throw error;
}

// The module's pre-backward hook on an output's node.
class PreBackward final : public torch::autograd::FunctionPreHook {
 public:
  PreBackward(dt_bridge_state_fn fn, PyObject* ctx) : fn_(fn), ctx_(Py_NewRef(ctx)) {}
  ~PreBackward() override {
    if (Py_IsInitialized()) {
      Gil gil;
      Py_DECREF(ctx_);
    }
  }
  PreBackward(const PreBackward&) = delete;
  PreBackward& operator=(const PreBackward&) = delete;

  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    Gil gil;
    if (fn_(ctx_) < 0) raise_callback_error();
    return grads;
  }

 private:
  dt_bridge_state_fn fn_;
  PyObject* ctx_;
};

// A parameter's post-accumulate-grad hook: its gradient, taken from .grad, to the callback as DLPack.
class GradReady final : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReady(dt_bridge_grad_fn fn, PyObject* ctx, Py_ssize_t i) : fn_(fn), ctx_(ctx), index_(i) {}

  void operator()(const torch::autograd::Variable& param) override {
    at::Tensor grad = std::exchange(param.mutable_grad(), at::Tensor());
    if (!grad.defined()) return;
    if (!grad.is_contiguous()) grad = grad.contiguous();
    DLManagedTensorVersioned* managed = at::toDLPackVersioned(grad);
    Gil gil;
    if (fn_(ctx_, index_, managed) < 0) raise_callback_error();
  }

  PyObject* ctx() const { return ctx_; }

 private:
  dt_bridge_grad_fn fn_;
  PyObject* ctx_;  // borrowed (_torch_bridge.h)
  Py_ssize_t index_;
};

// Runs body, turning a C++ exception into a Python one; returns body's value or -1.
template <typename Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (python_error& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "dtensor._torch_bridge.%s: %s", what, e.what());
  }
  return -1;
}

int hook_node(PyObject* out, dt_bridge_state_fn fn, PyObject* ctx) {
  return guarded("hook_node", [&] {
    const auto& node = THPVariable_Unpack(out).grad_fn();  // (older torch: a shared_ptr; newer: an intrusive_ptr)
    if (!node) return 0;
    node->add_pre_hook(std::make_unique<PreBackward>(fn, ctx));
    return 1;
  });
}

int set_grad_hook(PyObject* param, dt_bridge_grad_fn fn, PyObject* ctx, Py_ssize_t i) {
  return guarded("set_grad_hook", [&] {
    torch::autograd::impl::set_post_acc_grad_hooks(THPVariable_Unpack(param), std::make_unique<GradReady>(fn, ctx, i));
    return 0;
  });
}

int clear_grad_hook(PyObject* param, PyObject* ctx) {
  return guarded("clear_grad_hook", [&] {
    std::unique_ptr<torch::autograd::PostAccumulateGradHook>& hook =
        torch::autograd::impl::post_acc_grad_hooks(THPVariable_Unpack(param));
    auto* mine = dynamic_cast<GradReady*>(hook.get());
    if (mine != nullptr && mine->ctx() == ctx) hook.reset();
    return 0;
  });
}

int give_grad(PyObject* param, void* managed) {
  return guarded("give_grad", [&] {
    // The engine's gradient shards (CPU, a floating dtype) are all tensors fromDLPackVersioned takes: it owns
    // managed from here.
    at::Tensor grad = at::fromDLPackVersioned(static_cast<DLManagedTensorVersioned*>(managed));
    const at::Tensor& p = THPVariable_Unpack(param);
    if (grad.sizes() != p.sizes())
      throw std::runtime_error("a gradient shard of shape " + c10::str(grad.sizes()) + " for a parameter of shape " +
                               c10::str(p.sizes()));
    if (grad.scalar_type() != p.scalar_type()) grad = grad.to(p.scalar_type());
    at::Tensor& current = p.mutable_grad();
    if (current.defined())
      current.add_(grad);
    else
      current = std::move(grad);
    return 0;
  });
}

int grad_enabled() { return c10::GradMode::is_enabled() ? 1 : 0; }

int graph_task_id() { return torch::autograd::get_current_graph_task_id(); }

int requires_grad(PyObject* t) { return THPVariable_Unpack(t).requires_grad() ? 1 : 0; }

long long version(PyObject* t) {
  return guarded("version", [&] { return static_cast<long long>(THPVariable_Unpack(t)._version()); });
}

const DtTorchBridge kTable = {DT_TORCH_BRIDGE_ABI, hook_node,     set_grad_hook, clear_grad_hook, give_grad,
                              grad_enabled,        graph_task_id, requires_grad, version};

PyModuleDef kModule = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_torch_bridge",
    .m_doc = "dtensor.torch's libtorch bridge (the compiled hook bodies' autograd hooks in C++).",
    .m_size = -1,
    .m_methods = nullptr,
    .m_slots = nullptr,
    .m_traverse = nullptr,
    .m_clear = nullptr,
    .m_free = nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__torch_bridge() {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  PyObject* table = PyCapsule_New(const_cast<DtTorchBridge*>(&kTable), DT_TORCH_BRIDGE_CAPSULE, /*destructor=*/nullptr);
  if (table == nullptr || PyModule_AddObject(module, "table", table) < 0) {
    Py_XDECREF(table);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
