/* dtensor.torch's per-step FSDP hook bodies in C (Note [Hook costs] in dtensor/torch/_hook_bodies.py, whose
 * GroupHooks, StateHooks, finish_all and fsdp_call are the same in Python, step for step; read them first; the methods
 * the Python subclasses call are exposed, the rest are C functions): FsdpGroupBase (a group's gathering, resharding and
 * gradient hand-offs, calling the C API directly), FsdpStateBase (the pre-backward hook), fsdp_finish_all (the end of
 * backward) and fsdp_call (an FSDP module's __call__). Torch is never linked here: fsdp_setup hands over the few torch
 * callables used (DLPack in and out, grad mode, the graph task), and where the libtorch bridge was built
 * (fsdp_bridge; Note [The libtorch bridge] in dtensor/torch/_bridge.py) the autograd hooks, the gradient hand-offs
 * and the autograd state reads go through its C++ instead of torch's Python API. Whatever is not the common case calls
 * back into the Python subclass. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "_speedups.h"
#include "_torch_bridge.h"

/* The C API functions used, with the opaque handle as void* (the same ABI); fsdp_setup receives their addresses. */
typedef int32_t (*group_flag_fn)(void* g, int32_t flag);
typedef int32_t (*group_fn)(void* g);
typedef int32_t (*group_ptrs_fn)(void* g, void** out, int32_t n);
typedef int32_t (*group_export_fn)(void* g, int32_t what, void** out, int32_t n);
typedef int32_t (*group_accumulate_fn)(void* g, int32_t i, void* grad);
static struct {
  group_flag_fn unshard, reshard;
  group_fn wait_unshard, reduce_grads, wait_reduce;
  group_ptrs_fn unsharded_data;
  group_export_fn export_;
  group_accumulate_fn accumulate;
} api;
enum { SHARDED_GRADS = 1 }; /* DT_FSDP_SHARDED_GRADS */

/* DLPack 1.x's managed tensor, up to the deleter (the rest is not read here). */
typedef struct Managed {
  uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(struct Managed*);
} Managed;
static const char kVersioned[] = "dltensor_versioned";
static const char kUsedVersioned[] = "used_dltensor_versioned";

/* torch's callables (fsdp_setup) */
static PyObject* g_tensor_type;       /* torch.Tensor */
static PyObject* g_to_dlpack;         /* torch._C._to_dlpack_versioned or None */
static PyObject* g_from_dlpack;       /* torch._C._from_dlpack */
static PyObject* g_grad_enabled;      /* torch.is_grad_enabled */
static PyObject* g_task_id;           /* torch._C._current_graph_task_id */
static PyObject* g_grad_capsule;      /* _hook_bodies.grad_capsule (non-contiguous or CUDA gradients) */
static PyObject* g_in_flight;         /* the group whose reduce-scatter was started last and not waited for */
static const DtTorchBridge* g_bridge; /* the libtorch bridge (fsdp_bridge), or NULL */
static Py_ssize_t g_native;           /* faces whose post-accumulate-grad hook is the bridge's */

static PyObject *s_grad, *s_version, *s_h, *s_params, *s_sharded, *s_unsharded, *s_slots, *s_parameters, *s_dtype,
    *s_is_contiguous, *s_is_cuda, *s_requires_grad, *s_register_hook, *s_grad_fn, *s_register_prehook, *s_to,
    *s_rebuild_views, *s_ensure_group, *s_accumulate_grad_dlpack, *s_dt_state, *s_call, *s_queue_final,
    *s_callback_queued, *s_hook_outputs, *s_forward_failed, *s_pre_backward_hook;

/* A C API call with the GIL released (it may wait for peers); a status other than 0 raises and returns -1. */
#define CALL(name, expr)                             \
  do {                                               \
    int32_t status_;                                 \
    PyThreadState* ts_ = PyEval_SaveThread();        \
    status_ = (expr);                                \
    PyEval_RestoreThread(ts_);                       \
    if (status_ != 0) {                              \
      speedups_fail(status_, "dt_fsdp_group_" name); \
      return -1;                                     \
    }                                                \
  } while (0)

/* The same for a call that only reads the group's bookkeeping (it never waits): the GIL stays held. */
#define CALL_HELD(name, expr)                        \
  do {                                               \
    int32_t status_ = (expr);                        \
    if (status_ != 0) {                              \
      speedups_fail(status_, "dt_fsdp_group_" name); \
      return -1;                                     \
    }                                                \
  } while (0)

/* ---- FsdpGroupBase ----------------------------------------------------------------------------------------------- */
typedef struct {
  PyObject* params_dict; /* a module's _parameters */
  PyObject* attr;
} Slot;

typedef struct {
  PyObject *sharded, *unsharded, *sharded_dtype;
  Slot* slots;
  Py_ssize_t nslots;
  void* view;        /* the address the unsharded face views */
  long long version; /* the shard's version at the last gather */
  char native;       /* its gradient hand-offs go through the bridge (Note [The libtorch bridge]) */
  char tensor;       /* the shard is a torch.Tensor (the bridge reads its version) */
} Entry;

typedef struct {
  PyObject_HEAD PyObject* group; /* the FsdpParamGroup (members below are the Python fields of GroupHooks) */
  char gathered, unshard_issued, reduce_issued, reshard_after_backward, requires_gradient_sync, early_reshard;
  Py_ssize_t trainable, pending, received;
  /* bound by _bind() */
  void* handle;
  Entry* entries;
  void** scratch;
  Py_ssize_t n;
  int views_built;
} Group;

static PyTypeObject kGroupType;

static void entries_clear(Group* g) {
  Py_ssize_t i, k;
  for (i = 0; i < g->n; ++i) {
    Entry* e = &g->entries[i];
    if (e->native) {
      if (g_bridge->clear_grad_hook(e->unsharded, (PyObject*)g) < 0) PyErr_WriteUnraisable(e->unsharded);
      --g_native;
    }
    Py_CLEAR(e->sharded);
    Py_CLEAR(e->unsharded);
    Py_CLEAR(e->sharded_dtype);
    for (k = 0; k < e->nslots; ++k) {
      Py_CLEAR(e->slots[k].params_dict);
      Py_CLEAR(e->slots[k].attr);
    }
    PyMem_Free(e->slots);
  }
  PyMem_Free(g->entries);
  PyMem_Free(g->scratch);
  g->entries = NULL;
  g->scratch = NULL;
  g->n = 0;
  g->handle = NULL;
  g->views_built = 0;
}

static int Group_clear(PyObject* self) {
  Group* g = (Group*)self;
  if (g_in_flight == self) Py_CLEAR(g_in_flight);
  Py_CLEAR(g->group);
  entries_clear(g);
  return 0;
}

static int Group_traverse(PyObject* self, visitproc visit, void* arg) {
  Group* g = (Group*)self;
  Py_ssize_t i, k;
  Py_VISIT(g->group);
  for (i = 0; i < g->n; ++i) {
    Py_VISIT(g->entries[i].sharded);
    Py_VISIT(g->entries[i].unsharded);
    for (k = 0; k < g->entries[i].nslots; ++k) Py_VISIT(g->entries[i].slots[k].params_dict);
  }
  return 0;
}

static void Group_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  Group_clear(self);
  type->tp_free(self);
}

static int bridge_grad_ready(PyObject* ctx, Py_ssize_t i, void* managed);

/* Note [The libtorch bridge]: a CPU face that takes gradients gets the bridge's post-accumulate-grad hook (replacing
 * the Python one the subclass registered), and its reduced shards go to .grad through the bridge. */
static int bind_native(Group* g, Entry* e, Py_ssize_t i) {
  PyObject *rg, *cuda;
  int ok;
  if (g_bridge == NULL || !PyObject_TypeCheck(e->unsharded, (PyTypeObject*)g_tensor_type)) return 0;
  rg = PyObject_GetAttr(e->unsharded, s_requires_grad);
  cuda = rg == NULL ? NULL : PyObject_GetAttr(e->unsharded, s_is_cuda);
  ok = rg == Py_True && cuda == Py_False;
  Py_XDECREF(rg);
  Py_XDECREF(cuda);
  if (cuda == NULL) return -1;
  if (!ok) return 0;
  if (g_bridge->set_grad_hook(e->unsharded, bridge_grad_ready, (PyObject*)g, i) < 0) return -1;
  e->native = 1;
  ++g_native;
  return 0;
}

static int bind_entry(Entry* e, PyObject* m) {
  PyObject* slots;
  Py_ssize_t k;
  if ((e->sharded = PyObject_GetAttr(m, s_sharded)) == NULL) return -1;
  if ((e->unsharded = PyObject_GetAttr(m, s_unsharded)) == NULL) return -1;
  if ((e->sharded_dtype = PyObject_GetAttr(e->sharded, s_dtype)) == NULL) return -1;
  e->tensor = (char)PyObject_TypeCheck(e->sharded, (PyTypeObject*)g_tensor_type);
  if ((slots = PyObject_GetAttr(m, s_slots)) == NULL) return -1;
  if (!PyList_Check(slots)) {
    Py_DECREF(slots);
    PyErr_SetString(PyExc_TypeError, "FsdpGroupBase._bind: a parameter's slots must be a list");
    return -1;
  }
  e->slots = PyMem_Calloc((size_t)PyList_GET_SIZE(slots) + 1, sizeof(Slot));
  if (e->slots == NULL) {
    Py_DECREF(slots);
    PyErr_NoMemory();
    return -1;
  }
  for (k = 0; k < PyList_GET_SIZE(slots); ++k) {
    PyObject* item = PyList_GET_ITEM(slots, k);
    PyObject *module, *dict;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 1))) {
      Py_DECREF(slots);
      PyErr_SetString(PyExc_TypeError, "FsdpGroupBase._bind: a slot must be (module, attribute name)");
      return -1;
    }
    module = PyTuple_GET_ITEM(item, 0);
    dict = PyObject_GetAttr(module, s_parameters);
    if (dict == NULL || !PyDict_Check(dict)) {
      Py_XDECREF(dict);
      Py_DECREF(slots);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "FsdpGroupBase._bind: _parameters is not a dict");
      return -1;
    }
    e->slots[k].params_dict = dict;
    e->slots[k].attr = PyTuple_GET_ITEM(item, 1);
    Py_INCREF(e->slots[k].attr);
    e->nslots = k + 1;
  }
  Py_DECREF(slots);
  return 0;
}

/* _bind(): the engine handle and the parameters, read again (the group was made, materialized or closed). */
static PyObject* Group_bind(PyObject* self, PyObject* unused) {
  Group* g = (Group*)self;
  PyObject *h, *params;
  Py_ssize_t i, n;
  (void)unused;
  entries_clear(g);
  if (g->group == NULL || g->group == Py_None) Py_RETURN_NONE;
  h = PyObject_GetAttr(g->group, s_h);
  if (h == NULL) return NULL;
  if (h == Py_None) {
    Py_DECREF(h);
    Py_RETURN_NONE; /* closed */
  }
  g->handle = PyLong_AsVoidPtr(h);
  Py_DECREF(h);
  if (PyErr_Occurred()) return NULL;
  params = PyObject_GetAttr(self, s_params);
  if (params == NULL) return NULL;
  if (!PyList_Check(params)) {
    Py_DECREF(params);
    g->handle = NULL;
    PyErr_SetString(PyExc_TypeError, "FsdpGroupBase._bind: params must be a list");
    return NULL;
  }
  n = PyList_GET_SIZE(params);
  g->entries = PyMem_Calloc((size_t)n + 1, sizeof(Entry));
  g->scratch = PyMem_Calloc((size_t)n + 1, sizeof(void*));
  if (g->entries == NULL || g->scratch == NULL) {
    Py_DECREF(params);
    entries_clear(g);
    return PyErr_NoMemory();
  }
  for (i = 0; i < n; ++i) {
    g->n = i + 1;
    if (bind_entry(&g->entries[i], PyList_GET_ITEM(params, i)) < 0 || bind_native(g, &g->entries[i], i) < 0) {
      Py_DECREF(params);
      entries_clear(g);
      return NULL;
    }
  }
  Py_DECREF(params);
  Py_RETURN_NONE;
}

static int ensure_handle(Group* g) {
  PyObject* r;
  if (g->handle != NULL) return 0;
  r = PyObject_CallMethodNoArgs((PyObject*)g, s_ensure_group);
  if (r == NULL) return -1;
  Py_DECREF(r);
  if (g->handle == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "fully_shard: the parameter group has no engine group (closed?)");
    return -1;
  }
  return 0;
}

static int shard_version(Entry* e, long long* out) {
  PyObject* v;
  if (g_bridge != NULL && e->tensor) {
    *out = g_bridge->version(e->sharded);
    return *out < 0 ? -1 : 0;
  }
  v = PyObject_GetAttr(e->sharded, s_version);
  if (v == NULL) return -1;
  *out = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_slots(Entry* e, PyObject* face) {
  Py_ssize_t k;
  for (k = 0; k < e->nslots; ++k)
    if (PyDict_SetItem(e->slots[k].params_dict, e->slots[k].attr, face) < 0) return -1;
  return 0;
}

static int group_reshard(Group* g, int post_forward) {
  Py_ssize_t i;
  if (!g->gathered) {
    if (g->unshard_issued) { /* prefetched but not used: finish the collective before freeing */
      CALL("wait_unshard", api.wait_unshard(g->handle));
      g->unshard_issued = 0;
      CALL("reshard", api.reshard(g->handle, post_forward));
    }
    return 0;
  }
  for (i = 0; i < g->n; ++i) {
    if (set_slots(&g->entries[i], g->entries[i].sharded) < 0) return -1;
  }
  CALL("reshard", api.reshard(g->handle, post_forward));
  g->gathered = 0;
  return 0;
}

static int group_stale(Group* g) {
  Py_ssize_t i;
  for (i = 0; i < g->n; ++i) {
    long long v;
    if (shard_version(&g->entries[i], &v) < 0) return -1;
    if (v != g->entries[i].version) return 1;
  }
  return 0;
}

static int group_unshard(Group* g, int async) {
  if (ensure_handle(g) < 0) return -1;
  if (g->gathered) {
    int stale = group_stale(g);
    if (stale < 0 || (stale && group_reshard(g, 0) < 0)) return -1;
  }
  if (!g->unshard_issued && !g->gathered) {
    CALL("unshard", api.unshard(g->handle, async));
    g->unshard_issued = 1;
  }
  return 0;
}

static int group_wait(Group* g) {
  Py_ssize_t i;
  int moved;
  if (g->gathered) return 0;
  if (ensure_handle(g) < 0) return -1;
  if (!g->unshard_issued) CALL("unshard", api.unshard(g->handle, 0));
  CALL("wait_unshard", api.wait_unshard(g->handle));
  g->unshard_issued = 0;
  CALL_HELD("unsharded_data", api.unsharded_data(g->handle, g->scratch, (int32_t)g->n));
  moved = !g->views_built;
  for (i = 0; i < g->n && !moved; ++i) moved = g->scratch[i] != g->entries[i].view;
  if (moved) { /* a gather moved some (Note [Gathered memory that moves]) */
    PyObject* res = PyObject_CallMethodNoArgs((PyObject*)g, s_rebuild_views);
    if (res == NULL) return -1;
    Py_DECREF(res);
    for (i = 0; i < g->n; ++i) g->entries[i].view = g->scratch[i];
    g->views_built = 1;
  }
  for (i = 0; i < g->n; ++i)
    if (set_slots(&g->entries[i], g->entries[i].unsharded) < 0) return -1;
  for (i = 0; i < g->n; ++i)
    if (shard_version(&g->entries[i], &g->entries[i].version) < 0) return -1;
  g->gathered = 1;
  return 0;
}

static void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kVersioned)) { /* never consumed: release it */
    Managed* m = (Managed*)PyCapsule_GetPointer(capsule, kVersioned);
    if (m != NULL && m->deleter != NULL) m->deleter(m);
  }
}

static int group_collect(Group* g) {
  Py_ssize_t i;
  int failed = 0;
  if (g_in_flight == (PyObject*)g) Py_CLEAR(g_in_flight);
  if (!g->reduce_issued) return 0;
  CALL("wait_reduce", api.wait_reduce(g->handle));
  g->reduce_issued = 0;
  CALL_HELD("export", api.export_(g->handle, SHARDED_GRADS, g->scratch, (int32_t)g->n));
  for (i = 0; i < g->n; ++i) {
    Entry* e = &g->entries[i];
    Managed* m = (Managed*)g->scratch[i];
    PyObject *capsule, *grad, *current;
    if (m == NULL) continue;
    if (failed) { /* an earlier one raised: release the rest */
      m->deleter(m);
      continue;
    }
    if (e->native) { /* .grad = the shard (or += it), in C++ */
      if (g_bridge->give_grad(e->sharded, m) < 0) failed = 1;
      continue;
    }
    capsule = PyCapsule_New(m, kVersioned, capsule_destructor);
    if (capsule == NULL) {
      m->deleter(m);
      failed = 1;
      continue;
    }
    grad = PyObject_CallOneArg(g_from_dlpack, capsule); /* a view of the reduce-scatter output; keeps it alive */
    Py_DECREF(capsule);
    if (grad != NULL) {
      PyObject* dtype = PyObject_GetAttr(grad, s_dtype);
      if (dtype == NULL)
        Py_CLEAR(grad);
      else {
        Py_DECREF(dtype);
        if (dtype != e->sharded_dtype) Py_SETREF(grad, PyObject_CallMethodOneArg(grad, s_to, e->sharded_dtype));
      }
    }
    if (grad == NULL) {
      failed = 1;
      continue;
    }
    current = PyObject_GetAttr(e->sharded, s_grad);
    if (current != NULL && current != Py_None) Py_SETREF(grad, PyNumber_InPlaceAdd(current, grad));
    if (current == NULL || grad == NULL || PyObject_SetAttr(e->sharded, s_grad, grad) < 0) failed = 1;
    Py_XDECREF(current);
    Py_XDECREF(grad);
  }
  return failed ? -1 : 0;
}

static int group_reduce(Group* g) {
  if (g->received) {
    PyObject* previous = g_in_flight;
    if (previous != NULL && previous != (PyObject*)g) {
      int rc;
      Py_INCREF(previous);
      rc = group_collect((Group*)previous);
      Py_DECREF(previous);
      if (rc < 0) return -1;
    }
    CALL("reduce_grads", api.reduce_grads(g->handle));
    g->reduce_issued = g->requires_gradient_sync;
    if (g->reduce_issued) {
      Py_INCREF(g);
      Py_XSETREF(g_in_flight, (PyObject*)g);
    }
  }
  g->received = 0;
  return 0;
}

/* Hands a gradient's capsule to the engine (taken over); a pre-1.0 capsule goes through the Python binding. */
static int accumulate(Group* g, Py_ssize_t i, PyObject* capsule) {
  Managed* m;
  if (!PyCapsule_IsValid(capsule, kVersioned)) {
    PyObject* index = PyLong_FromSsize_t(i);
    PyObject* r =
        index == NULL ? NULL : PyObject_CallMethodObjArgs(g->group, s_accumulate_grad_dlpack, index, capsule, NULL);
    Py_XDECREF(index);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
  }
  m = (Managed*)PyCapsule_GetPointer(capsule, kVersioned);
  if (m == NULL || PyCapsule_SetName(capsule, kUsedVersioned) < 0) return -1;
  CALL("accumulate_grad_dlpack", api.accumulate(g->handle, (int32_t)i, m));
  return 0;
}

/* After a gradient went to the engine: the group's last one starts its reduction and reshards. */
static int group_grad_taken(Group* g) {
  g->received += 1;
  g->pending -= 1;
  if (g->pending == 0) {
    if (group_reduce(g) < 0) return -1;
    if (g->early_reshard && g->reshard_after_backward && group_reshard(g, 0) < 0) return -1;
  }
  return 0;
}

static int group_grad_ready(Group* g, Py_ssize_t i, PyObject* p) {
  PyObject *grad, *capsule = NULL;
  int rc;
  if (ensure_handle(g) < 0) return -1;
  if (i < 0 || i >= g->n) {
    PyErr_Format(PyExc_IndexError, "FsdpGroupBase._grad_ready: parameter %zd of %zd", i, g->n);
    return -1;
  }
  grad = PyObject_GetAttr(p, s_grad);
  if (grad == NULL) return -1;
  if (PyObject_SetAttr(p, s_grad, Py_None) < 0) {
    Py_DECREF(grad);
    return -1;
  }
  if (grad == Py_None) {
    Py_DECREF(grad);
    return 0;
  }
  if (g_to_dlpack != Py_None) {
    PyObject* contiguous = PyObject_CallMethodNoArgs(grad, s_is_contiguous);
    PyObject* cuda = contiguous != NULL ? PyObject_GetAttr(grad, s_is_cuda) : NULL;
    if (cuda != NULL && contiguous == Py_True && cuda == Py_False)
      capsule = PyObject_CallOneArg(g_to_dlpack, grad);
    else if (cuda != NULL)
      capsule = PyObject_CallOneArg(g_grad_capsule, grad);
    Py_XDECREF(contiguous);
    Py_XDECREF(cuda);
  } else {
    capsule = PyObject_CallOneArg(g_grad_capsule, grad);
  }
  Py_DECREF(grad);
  if (capsule == NULL) return -1;
  rc = accumulate(g, i, capsule);
  Py_DECREF(capsule);
  return rc < 0 ? -1 : group_grad_taken(g);
}

/* The bridge's post-accumulate-grad hook: the gradient (taken from .grad) to the engine. */
static int bridge_grad_ready(PyObject* ctx, Py_ssize_t i, void* managed) {
  Group* g = (Group*)ctx;
  if (g->handle == NULL || i < 0 || i >= g->n) { /* (the group removes its hooks when it closes) */
    ((Managed*)managed)->deleter((Managed*)managed);
    PyErr_SetString(PyExc_RuntimeError, "fully_shard: a gradient reached a closed parameter group");
    return -1;
  }
  CALL("accumulate_grad_dlpack", api.accumulate(g->handle, (int32_t)i, managed));
  return group_grad_taken(g);
}

static int group_finish_backward(Group* g, int wait) {
  if (g->pending != g->trainable && group_reduce(g) < 0) return -1;
  g->pending = g->trainable;
  if (wait) { /* Note [Not the last backward] */
    PyObject* previous;
    if (group_collect(g) < 0) return -1;
    previous = g_in_flight; /* left by an earlier backward that was not the last */
    if (previous != NULL) {
      int rc;
      Py_INCREF(previous);
      rc = group_collect((Group*)previous);
      Py_DECREF(previous);
      if (rc < 0) return -1;
    }
  }
  if (g->reshard_after_backward && group_reshard(g, 0) < 0) return -1;
  return 0;
}

static PyObject* none_or_null(int rc) {
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

/* A method's one optional flag (positional): `fallback` when not given; -1 (raised, naming `usage`) when more are. */
static int optional_flag(PyObject* const* args, Py_ssize_t nargs, int fallback, const char* usage) {
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
  }
  return nargs == 1 ? PyObject_IsTrue(args[0]) : fallback;
}

static PyObject* Group_unshard(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  int async = optional_flag(args, nargs, 1, "unshard(async_op=True)");
  if (async < 0) return NULL;
  return none_or_null(group_unshard((Group*)self, async));
}

static PyObject* Group_wait(PyObject* self, PyObject* unused) {
  (void)unused;
  return none_or_null(group_wait((Group*)self));
}

static PyObject* Group_reshard(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  int post_forward = optional_flag(args, nargs, 0, "reshard(post_forward=False)");
  if (post_forward < 0) return NULL;
  return none_or_null(group_reshard((Group*)self, post_forward));
}

static PyObject* Group_grad_ready(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Py_ssize_t i;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_grad_ready(i, p)");
    return NULL;
  }
  i = PyLong_AsSsize_t(args[0]);
  if (i == -1 && PyErr_Occurred()) return NULL;
  return none_or_null(group_grad_ready((Group*)self, i, args[1]));
}

static PyObject* Group_finish_backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  int wait = optional_flag(args, nargs, 1, "finish_backward(wait=True)");
  if (wait < 0 || ensure_handle((Group*)self) < 0) return NULL;
  return none_or_null(group_finish_backward((Group*)self, wait));
}

static PyMethodDef kGroupMethods[] = {
    {"_bind", Group_bind, METH_NOARGS, "Reads the engine handle and the parameters again."},
    {"unshard", (PyCFunction)(void (*)(void))Group_unshard, METH_FASTCALL, "unshard(async_op=True)"},
    {"wait", Group_wait, METH_NOARGS, "Finishes the gather; the faces and slots view the gathered memory."},
    {"reshard", (PyCFunction)(void (*)(void))Group_reshard, METH_FASTCALL, "reshard(post_forward=False)"},
    {"_grad_ready", (PyCFunction)(void (*)(void))Group_grad_ready, METH_FASTCALL, "_grad_ready(i, p)"},
    {"finish_backward", (PyCFunction)(void (*)(void))Group_finish_backward, METH_FASTCALL,
     "finish_backward(wait=True): after backward, reduced, collected (unless wait is false), resharded."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef kGroupMembers[] = {
    {"group", T_OBJECT, offsetof(Group, group), 0, NULL},
    {"gathered", T_BOOL, offsetof(Group, gathered), 0, NULL},
    {"unshard_issued", T_BOOL, offsetof(Group, unshard_issued), 0, NULL},
    {"reduce_issued", T_BOOL, offsetof(Group, reduce_issued), 0, NULL},
    {"reshard_after_backward", T_BOOL, offsetof(Group, reshard_after_backward), 0, NULL},
    {"requires_gradient_sync", T_BOOL, offsetof(Group, requires_gradient_sync), 0, NULL},
    {"early_reshard", T_BOOL, offsetof(Group, early_reshard), 0, NULL},
    {"trainable", T_PYSSIZET, offsetof(Group, trainable), 0, NULL},
    {"pending", T_PYSSIZET, offsetof(Group, pending), 0, NULL},
    {"received", T_PYSSIZET, offsetof(Group, received), 0, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject kGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0)  // (the macro ends in a comma)
        .tp_name = "dtensor._speedups.FsdpGroupBase",
    .tp_basicsize = sizeof(Group),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A dtensor.torch parameter group's per-step work (GroupHooks in C).",
    .tp_new = PyType_GenericNew, /* the subclass's __init__ sets every field */
    .tp_dealloc = Group_dealloc,
    .tp_traverse = Group_traverse,
    .tp_clear = Group_clear,
    .tp_methods = kGroupMethods,
    .tp_members = kGroupMembers,
};

/* ---- FsdpStateBase ----------------------------------------------------------------------------------------------- */
typedef struct {
  PyObject_HEAD PyObject* group; /* the TorchParamGroup (an FsdpGroupBase) or None */
  PyObject *ctx, *forward_targets, *backward_targets, *inner_call;
  char fast, reshard_post, pre_backward_done;
} State;

static int State_clear(PyObject* self) {
  State* s = (State*)self;
  Py_CLEAR(s->group);
  Py_CLEAR(s->ctx);
  Py_CLEAR(s->forward_targets);
  Py_CLEAR(s->backward_targets);
  Py_CLEAR(s->inner_call);
  return 0;
}

static int State_traverse(PyObject* self, visitproc visit, void* arg) {
  State* s = (State*)self;
  Py_VISIT(s->group);
  Py_VISIT(s->ctx);
  Py_VISIT(s->forward_targets);
  Py_VISIT(s->backward_targets);
  Py_VISIT(s->inner_call);
  return 0;
}

static void State_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  State_clear(self);
  type->tp_free(self);
}

static Group* group_of(PyObject* o) {
  if (o == NULL || o == Py_None) return NULL;
  if (!PyObject_TypeCheck(o, &kGroupType)) {
    PyErr_Format(PyExc_TypeError, "fully_shard: expected an FsdpGroupBase, got %s", Py_TYPE(o)->tp_name);
    return NULL;
  }
  return (Group*)o;
}

/* Starts the gathers of a tuple of groups (the prefetch targets). */
static int unshard_all(PyObject* targets) {
  Py_ssize_t i;
  if (targets == NULL || !PyTuple_Check(targets)) return 0;
  for (i = 0; i < PyTuple_GET_SIZE(targets); ++i) {
    Group* t = group_of(PyTuple_GET_ITEM(targets, i));
    if (t == NULL || group_unshard(t, 1) < 0) return -1;
  }
  return 0;
}

/* The pre-backward hook: the group gathered again before the backward nodes that read it. */
static int state_pre_backward(PyObject* self) {
  State* s = (State*)self;
  Group* g;
  if (s->pre_backward_done) return 0;
  s->pre_backward_done = 1;
  if (s->ctx != NULL) {
    PyObject* queued = PyObject_GetAttr(s->ctx, s_callback_queued);
    int truth = queued == NULL ? -1 : PyObject_IsTrue(queued);
    Py_XDECREF(queued);
    if (truth < 0) return -1;
    if (!truth) {
      PyObject* r = PyObject_CallMethodNoArgs(self, s_queue_final);
      if (r == NULL) return -1;
      Py_DECREF(r);
    }
  }
  g = group_of(s->group);
  if (g == NULL) return PyErr_Occurred() ? -1 : 0;
  if (group_unshard(g, 1) < 0 || group_wait(g) < 0 || unshard_all(s->backward_targets) < 0) return -1;
  return 0;
}

/* _pre_backward_hook(grad): state_pre_backward as a Python hook. */
static PyObject* State_pre_backward_hook(PyObject* self, PyObject* grad) {
  (void)grad;
  return none_or_null(state_pre_backward(self));
}

static PyMethodDef kStateMethods[] = {
    {"_pre_backward_hook", State_pre_backward_hook, METH_O, "The hook on each forward output."}, {NULL, NULL, 0, NULL}};

static PyMemberDef kStateMembers[] = {{"group", T_OBJECT, offsetof(State, group), 0, NULL},
                                      {"ctx", T_OBJECT, offsetof(State, ctx), 0, NULL},
                                      {"forward_targets", T_OBJECT, offsetof(State, forward_targets), 0, NULL},
                                      {"backward_targets", T_OBJECT, offsetof(State, backward_targets), 0, NULL},
                                      {"inner_call", T_OBJECT, offsetof(State, inner_call), 0, NULL},
                                      {"fast", T_BOOL, offsetof(State, fast), 0, NULL},
                                      {"reshard_post", T_BOOL, offsetof(State, reshard_post), 0, NULL},
                                      {"pre_backward_done", T_BOOL, offsetof(State, pre_backward_done), 0, NULL},
                                      {NULL, 0, 0, 0, NULL}};

static PyTypeObject kStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)  // (the macro ends in a comma)
        .tp_name = "dtensor._speedups.FsdpStateBase",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An FSDP module's per-call fields and its pre-backward hook (StateHooks in C).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = State_dealloc,
    .tp_traverse = State_traverse,
    .tp_clear = State_clear,
    .tp_methods = kStateMethods,
    .tp_members = kStateMembers,
};

/* ---- fsdp_call: an FSDP module's __call__ ------------------------------------------------------------------------ */
static PyObject* call_python(PyObject* state, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject *rest, *kwargs, *r;
  Py_ssize_t i;
  rest = PyTuple_New(nargs - 1);
  if (rest == NULL) return NULL;
  for (i = 1; i < nargs; ++i) PyTuple_SET_ITEM(rest, i - 1, Py_NewRef(args[i]));
  kwargs = PyDict_New();
  if (kwargs == NULL) {
    Py_DECREF(rest);
    return NULL;
  }
  for (i = 0; kwnames != NULL && i < PyTuple_GET_SIZE(kwnames); ++i)
    if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
      Py_DECREF(rest);
      Py_DECREF(kwargs);
      return NULL;
    }
  r = PyObject_CallMethodObjArgs(state, s_call, args[0], rest, kwargs, NULL);
  Py_DECREF(rest);
  Py_DECREF(kwargs);
  return r;
}

static int in_backward(void) {
  PyObject* id;
  long long v;
  if (g_bridge != NULL) return g_bridge->graph_task_id() != -1;
  id = PyObject_CallNoArgs(g_task_id);
  if (id == NULL) return -1;
  v = PyLong_AsLongLong(id);
  Py_DECREF(id);
  if (v == -1 && PyErr_Occurred()) return -1;
  return v != -1;
}

static int grad_enabled(void) {
  PyObject* enabled;
  int on;
  if (g_bridge != NULL) return g_bridge->grad_enabled();
  enabled = PyObject_CallNoArgs(g_grad_enabled);
  if (enabled == NULL) return -1;
  on = PyObject_IsTrue(enabled);
  Py_DECREF(enabled);
  return on;
}

static int hook_output(PyObject* state, PyObject* out) {
  PyObject* r;
  int on = grad_enabled();
  if (on <= 0) return on;
  if (PyObject_TypeCheck(out, (PyTypeObject*)g_tensor_type)) {
    PyObject *hook, *node;
    if (g_bridge != NULL) { /* a C++ pre-hook on the node (Note [The libtorch bridge]); none: as below */
      int rc;
      if (!g_bridge->requires_grad(out)) return 0;
      rc = g_bridge->hook_node(out, state_pre_backward, state);
      if (rc != 0) return rc < 0 ? -1 : 0;
    } else {
      PyObject* rg = PyObject_GetAttr(out, s_requires_grad);
      if (rg == NULL) return -1;
      Py_DECREF(rg);
      if (rg != Py_True) return 0;
    }
    hook = PyObject_GetAttr(state, s_pre_backward_hook);
    if (hook == NULL) return -1;
    node = PyObject_GetAttr(out, s_grad_fn);
    if (node == NULL) {
      Py_DECREF(hook);
      return -1;
    }
    /* Note [The pre-backward hook's node] */
    r = PyObject_CallMethodOneArg(node != Py_None ? node : out, node != Py_None ? s_register_prehook : s_register_hook,
                                  hook);
    Py_DECREF(node);
    Py_DECREF(hook);
  } else {
    r = PyObject_CallMethodOneArg(state, s_hook_outputs, out);
  }
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

static PyObject* fsdp_call(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject *state, *out, *inner;
  State* s;
  Group* g;
  int backward;
  (void)self;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "fsdp_call: the module is the first argument");
    return NULL;
  }
  state = PyObject_GetAttr(args[0], s_dt_state);
  if (state == NULL) return NULL;
  if (!PyObject_TypeCheck(state, &kStateType) || !((State*)state)->fast) {
    out = call_python(state, args, nargs, kwnames);
    Py_DECREF(state);
    return out;
  }
  s = (State*)state;
  g = group_of(s->group);
  if (g == NULL || s->inner_call == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "fsdp_call: a fast state without a group or call");
    Py_DECREF(state);
    return NULL;
  }
  /* held for the call: the forward runs Python code, which may replace the state's fields */
  Py_INCREF(g);
  inner = Py_NewRef(s->inner_call);
  if ((backward = in_backward()) < 0) goto failed;
  if (backward) { /* activation checkpointing's recomputation: gathered by the pre-backward */
    if (group_wait(g) < 0) goto failed;
    out = PyObject_Vectorcall(inner, args, nargs, kwnames);
    goto done;
  }
  if (group_unshard(g, 1) < 0 || group_wait(g) < 0 || unshard_all(s->forward_targets) < 0) goto failed;
  out = PyObject_Vectorcall(inner, args, nargs, kwnames);
  if (out == NULL) { /* the forward raised: reshard as after a forward, keep its exception */
    PyObject *type, *value, *traceback, *r;
    PyErr_Fetch(&type, &value, &traceback);
    r = PyObject_CallMethodNoArgs(state, s_forward_failed);
    if (r == NULL) {
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(traceback);
    } else {
      Py_DECREF(r);
      PyErr_Restore(type, value, traceback);
    }
    goto failed;
  }
  if ((s->reshard_post && group_reshard(g, 1) < 0) || hook_output(state, out) < 0) {
    Py_DECREF(out);
    goto failed;
  }
  goto done;
failed:
  out = NULL;
done:
  Py_DECREF(inner);
  Py_DECREF(g);
  Py_DECREF(state);
  return out;
}

/* finish_all(order, states, wait): the end of backward over a root's modules (finish_all in _hook_bodies.py). */
static PyObject* fsdp_finish_all(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  PyObject *order, *states;
  Py_ssize_t i;
  int wait;
  (void)self;
  if (nargs != 3 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "finish_all(order: list, states: list, wait)");
    return NULL;
  }
  order = args[0];
  states = args[1];
  if ((wait = PyObject_IsTrue(args[2])) < 0) return NULL;
  for (i = PyList_GET_SIZE(order); i-- > 0;) {
    PyObject* item = PyList_GET_ITEM(order, i);
    State* s;
    Group* g;
    int rc;
    if (!PyObject_TypeCheck(item, &kStateType)) {
      PyErr_Format(PyExc_TypeError, "finish_all: expected an FsdpStateBase, got %s", Py_TYPE(item)->tp_name);
      return NULL;
    }
    s = (State*)item;
    if ((g = group_of(s->group)) == NULL) {
      if (PyErr_Occurred()) return NULL;
      continue;
    }
    if (!(s->pre_backward_done || g->gathered || g->unshard_issued)) continue;
    Py_INCREF(item); /* (the body may call back into Python, which may change the list) */
    rc = ensure_handle(g) < 0 ? -1 : group_finish_backward(g, wait);
    Py_DECREF(item);
    if (rc < 0) return NULL;
    if (i > PyList_GET_SIZE(order)) i = PyList_GET_SIZE(order);
  }
  for (i = 0; i < PyList_GET_SIZE(states); ++i) {
    PyObject* item = PyList_GET_ITEM(states, i);
    if (PyObject_TypeCheck(item, &kStateType)) ((State*)item)->pre_backward_done = 0;
  }
  Py_RETURN_NONE;
}

static PyMethodDef kCallDef = {"fsdp_call", (PyCFunction)(void (*)(void))fsdp_call, METH_FASTCALL | METH_KEYWORDS,
                               "An FSDP module's __call__: pre-forward, the class's own call, post-forward."};

/* ---- fsdp_setup -------------------------------------------------------------------------------------------------- */
/* fsdp_setup(addresses, tensor_type, to_dlpack, from_dlpack, grad_enabled, task_id, grad_capsule): addresses are
 * those of dt_fsdp_group_ unshard, wait_unshard, reshard, unsharded_data, export, accumulate_grad_dlpack,
 * reduce_grads, wait_reduce. */
static PyObject* fsdp_setup(PyObject* self, PyObject* args) {
  unsigned long long a[8];
  PyObject *tensor_type, *to_dlpack, *from_dlpack, *grad_enabled, *task_id, *grad_capsule;
  int i;
  (void)self;
  if (!PyArg_ParseTuple(args, "(KKKKKKKK)O!OOOOO", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &PyType_Type,
                        &tensor_type, &to_dlpack, &from_dlpack, &grad_enabled, &task_id, &grad_capsule))
    return NULL;
  for (i = 0; i < 8; ++i)
    if (a[i] == 0) {
      PyErr_SetString(PyExc_ValueError, "fsdp_setup: a function address is 0");
      return NULL;
    }
  api.unshard = (group_flag_fn)(uintptr_t)a[0];
  api.wait_unshard = (group_fn)(uintptr_t)a[1];
  api.reshard = (group_flag_fn)(uintptr_t)a[2];
  api.unsharded_data = (group_ptrs_fn)(uintptr_t)a[3];
  api.export_ = (group_export_fn)(uintptr_t)a[4];
  api.accumulate = (group_accumulate_fn)(uintptr_t)a[5];
  api.reduce_grads = (group_fn)(uintptr_t)a[6];
  api.wait_reduce = (group_fn)(uintptr_t)a[7];
  Py_XSETREF(g_tensor_type, Py_NewRef(tensor_type));
  Py_XSETREF(g_to_dlpack, Py_NewRef(to_dlpack));
  Py_XSETREF(g_from_dlpack, Py_NewRef(from_dlpack));
  Py_XSETREF(g_grad_enabled, Py_NewRef(grad_enabled));
  Py_XSETREF(g_task_id, Py_NewRef(task_id));
  Py_XSETREF(g_grad_capsule, Py_NewRef(grad_capsule));
  Py_RETURN_NONE;
}

/* fsdp_bridge(table or None): the libtorch bridge's capsule (Note [The libtorch bridge]), set before any group binds
 * to it. */
static PyObject* fsdp_bridge(PyObject* self, PyObject* capsule) {
  const DtTorchBridge* table = NULL;
  (void)self;
  if (capsule != Py_None) {
    table = (const DtTorchBridge*)PyCapsule_GetPointer(capsule, DT_TORCH_BRIDGE_CAPSULE);
    if (table == NULL) return NULL;
    if (table->abi != DT_TORCH_BRIDGE_ABI) {
      PyErr_Format(PyExc_ImportError,
                   "fsdp_bridge: the libtorch bridge's table is version %u, these hook bodies take %d",
                   (unsigned)table->abi, DT_TORCH_BRIDGE_ABI);
      return NULL;
    }
  }
  if (table != g_bridge && g_native > 0) {
    PyErr_Format(PyExc_RuntimeError, "fsdp_bridge: %zd parameters use the current bridge; set it before fully_shard",
                 g_native);
    return NULL;
  }
  g_bridge = table;
  Py_RETURN_NONE;
}

/* The module's plain functions (fsdp_call is added apart: it binds as a method). */
static PyMethodDef kModuleFunctions[] = {
    {"fsdp_setup", fsdp_setup, METH_VARARGS,
     "fsdp_setup(addresses, tensor_type, to_dlpack, from_dlpack, grad_enabled, task_id, grad_capsule)"},
    {"fsdp_bridge", fsdp_bridge, METH_O, "fsdp_bridge(table or None): the libtorch bridge's capsule, or none"},
    {"fsdp_finish_all", (PyCFunction)(void (*)(void))fsdp_finish_all, METH_FASTCALL,
     "fsdp_finish_all(order, states, wait): the end of backward"},
    {NULL, NULL, 0, NULL}};

static int intern_all(void) {
  struct {
    PyObject** slot;
    const char* text;
  } names[] = {{&s_grad, "grad"},
               {&s_version, "_version"},
               {&s_h, "_h"},
               {&s_params, "params"},
               {&s_sharded, "sharded"},
               {&s_unsharded, "unsharded"},
               {&s_slots, "slots"},
               {&s_parameters, "_parameters"},
               {&s_dtype, "dtype"},
               {&s_is_contiguous, "is_contiguous"},
               {&s_is_cuda, "is_cuda"},
               {&s_requires_grad, "requires_grad"},
               {&s_register_hook, "register_hook"},
               {&s_grad_fn, "grad_fn"},
               {&s_register_prehook, "register_prehook"},
               {&s_to, "to"},
               {&s_rebuild_views, "_rebuild_views"},
               {&s_ensure_group, "_ensure_group"},
               {&s_accumulate_grad_dlpack, "accumulate_grad_dlpack"},

               {&s_dt_state, "_dt_state"},
               {&s_call, "call"},
               {&s_queue_final, "_queue_final"},
               {&s_callback_queued, "callback_queued"},
               {&s_hook_outputs, "_hook_outputs"},
               {&s_forward_failed, "_forward_failed"},
               {&s_pre_backward_hook, "_pre_backward_hook"}};
  size_t i;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return -1;
  return 0;
}

static int add_type(PyObject* module, const char* name, PyTypeObject* type) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(module, name, (PyObject*)type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

int fsdp_hooks_add(PyObject* module) {
  PyObject *call, *method;
  if (intern_all() < 0) return -1;
  if (add_type(module, "FsdpGroupBase", &kGroupType) < 0 || add_type(module, "FsdpStateBase", &kStateType) < 0)
    return -1;
  call = PyCFunction_New(&kCallDef, NULL);
  if (call == NULL) return -1;
  method = PyInstanceMethod_New(call); /* binds like a function: module(x) calls fsdp_call(module, x) */
  Py_DECREF(call);
  if (method == NULL || PyModule_AddObject(module, "fsdp_call", method) < 0) {
    Py_XDECREF(method);
    return -1;
  }
  return PyModule_AddFunctions(module, kModuleFunctions);
}
