/* The libtorch bridge's table (dtensor/_torch_bridge.cpp, built against the installed torch: Note [The libtorch
 * bridge] in dtensor/torch/_bridge.py), handed to the compiled hook bodies (dtensor/_fsdp_hooks.c) as a capsule named
 * DT_TORCH_BRIDGE_CAPSULE. Each entry takes torch tensors as their Python objects (torch.Tensor, checked by the
 * caller) and returns -1 with a Python exception set on failure. The callbacks run with the GIL held and return -1
 * with an exception set to fail the backward with it. */
#ifndef DTENSOR_TORCH_BRIDGE_H
#define DTENSOR_TORCH_BRIDGE_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_TORCH_BRIDGE_CAPSULE "dtensor._torch_bridge.table"
#define DT_TORCH_BRIDGE_ABI 2

typedef int (*dt_bridge_state_fn)(PyObject* ctx);
/* managed: the gradient as a DLPack 1.x DLManagedTensorVersioned (contiguous, on the CPU), taken over by the callee */
typedef int (*dt_bridge_grad_fn)(PyObject* ctx, Py_ssize_t i, void* managed);

typedef struct {
  uint32_t abi; /* DT_TORCH_BRIDGE_ABI */
  /* A pre-hook on out's autograd node that calls fn(ctx) just before the node runs (ctx held by the hook). 1: done;
   * 0: out has no node (a leaf), nothing done. */
  int (*hook_node)(PyObject* out, dt_bridge_state_fn fn, PyObject* ctx);
  /* param's post-accumulate-grad hook (replacing any): takes its .grad (leaving None) and calls fn(ctx, i, grad). ctx
   * is borrowed: the owner calls clear_grad_hook before it goes. */
  int (*set_grad_hook)(PyObject* param, dt_bridge_grad_fn fn, PyObject* ctx, Py_ssize_t i);
  /* Removes param's post-accumulate-grad hook if set_grad_hook set it with this ctx. */
  int (*clear_grad_hook)(PyObject* param, PyObject* ctx);
  /* param.grad = the tensor of managed (a DLManagedTensorVersioned, taken over: always, even on failure), cast to
   * param's dtype; added to an existing .grad instead. */
  int (*give_grad)(PyObject* param, void* managed);
  /* What a module call and a gather read, without a Python call or attribute: grad mode (1 on, 0 off), the running
   * backward's graph task id (-1 outside a backward), t's requires_grad (1 or 0), and t's version counter (-1 with an
   * exception set when t has none, as an inference tensor). */
  int (*grad_enabled)(void);
  int (*graph_task_id)(void);
  int (*requires_grad)(PyObject* t);
  long long (*version)(PyObject* t);
} DtTorchBridge;

#ifdef __cplusplus
}
#endif

#endif
