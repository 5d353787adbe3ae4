/* Optional fast paths for the hottest calls, as a CPython extension over the same C API: TensorBase, the base type of
 * dtensor.DTensor when this module is present (the handle, close(), release when collected, `with`, and
 * redistribute() whole: the placement-spec cache lookup, the C call and the result object, with no Python frame).
 *
 * It links nothing of dtensor's: _lib.py hands it the addresses of the C functions of the library ctypes already
 * loaded (so there is one library, one handle registry), and the Python callable that turns a status into an
 * exception (so errors are raised exactly as on the ctypes path). Without it DTensor derives from _handle.Handle and
 * ctypes serves every call; both paths behave the same (the test suite runs both ways). */
#define PY_SSIZE_T_CLEAN
#include "_speedups.h"

/* The C API's signatures, with its opaque handle types as void* (the same ABI). */
typedef int32_t (*redistribute_fn)(void* t, const void* placements, int32_t n, void** out);
typedef int32_t (*destroy_fn)(void* t);

static redistribute_fn g_redistribute = NULL;
static destroy_fn g_destroy = NULL;
static PyObject* g_raise = NULL;          /* raise_status(status, function_name): raises the matching dtensor.Error */
static PyObject* g_convert = NULL;        /* convert(placements) -> (dt_placement_t array as bytes, count) */
static PyObject* g_placement_type = NULL; /* dtensor.Placement: a single one is a cache key too */
static PyObject* g_specs = NULL;          /* placements key -> (bytes, count); see spec_of */

/* Bounded: specs are few in a program (one per distinct placements list); a program that makes unboundedly many
 * (text built per call) clears it now and then rather than growing. */
#define SPEC_CACHE_MAX 256

PyObject* speedups_fail(int32_t status, const char* function) {
  PyObject* r = PyObject_CallFunction(g_raise, "is", (int)status, function);
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%s failed with status %d", function, (int)status);
  return NULL;
}

static int check_init(void) {
  if (g_redistribute != NULL && g_convert != NULL) return 0;
  PyErr_SetString(PyExc_RuntimeError, "dtensor._speedups: init and set_placements were not called");
  return -1;
}

static int is_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* The cache key of a placements argument, or NULL (no error set) when it has none: the conversion depends only on the
 * value of a tuple, a list (as a tuple), a str, or a single Placement. Placements are interned (placements.py: Note
 * [Interned placements]), so hashing and comparing a key never runs Python code. */
static PyObject* spec_key(PyObject* placements) {
  if (PyList_CheckExact(placements)) return PyList_AsTuple(placements);
  if (PyTuple_CheckExact(placements) || PyUnicode_CheckExact(placements) ||
      PyObject_TypeCheck(placements, (PyTypeObject*)g_placement_type)) {
    Py_INCREF(placements);
    return placements;
  }
  return NULL;
}

/* (bytes, count) for placements, a new reference; from the cache, else converted by Python (which validates: a bad
 * argument raises its TypeError there) and cached. */
static PyObject* spec_of(PyObject* placements) {
  PyObject* key = spec_key(placements);
  PyObject* spec;
  if (key == NULL && PyErr_Occurred()) return NULL;
  if (key != NULL) {
    spec = PyDict_GetItemWithError(g_specs, key);
    if (spec != NULL) {
      Py_DECREF(key);
      Py_INCREF(spec);
      return spec;
    }
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
        Py_DECREF(key);
        return NULL;
      }
      PyErr_Clear(); /* unhashable inside (a list in the tuple): not a key; convert says what is wrong */
      Py_CLEAR(key);
    }
  }
  spec = PyObject_CallOneArg(g_convert, placements);
  if (spec != NULL && (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2 ||
                       !PyBytes_CheckExact(PyTuple_GET_ITEM(spec, 0)) || !PyLong_Check(PyTuple_GET_ITEM(spec, 1)))) {
    PyErr_SetString(PyExc_TypeError, "dtensor._speedups: the placements converter must return (bytes, int)");
    Py_CLEAR(spec);
  }
  if (spec != NULL && key != NULL) {
    if (PyDict_GET_SIZE(g_specs) >= SPEC_CACHE_MAX) PyDict_Clear(g_specs);
    if (PyDict_SetItem(g_specs, key, spec) < 0) Py_CLEAR(spec);
  }
  Py_XDECREF(key);
  return spec;
}

/* ---- TensorBase ------------------------------------------------------------------------------------------------- */

typedef struct {
  PyObject ob_base; /* PyObject_HEAD */
  void* handle;     /* NULL: closed (or never given one) */
} TensorBase;

static PyObject* handle_object(void* h) {
  if (h == NULL) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)h);
}

/* A handle argument: an int (as ctypes gives c_void_p values) or None (no handle). */
static int handle_from_object(PyObject* o, void** out) {
  unsigned long long v;
  if (o == Py_None) {
    *out = NULL;
    return 0;
  }
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "dtensor: a handle is an int (or None), got %s", Py_TYPE(o)->tp_name);
    return -1;
  }
  v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  *out = (void*)(uintptr_t)v;
  return 0;
}

static PyObject* TensorBase_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  (void)args;
  (void)kwds;
  return type->tp_alloc(type, 0); /* zeroed: no handle */
}

/* __init__(handle) */
static int TensorBase_init(PyObject* self, PyObject* args, PyObject* kwds) {
  static char* kwlist[] = {"handle", NULL};
  PyObject* h = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:__init__", kwlist, &h)) return -1;
  return handle_from_object(h, &((TensorBase*)self)->handle);
}

/* Releases a handle, ignoring failure (a destructor must not raise). */
static void release_quietly(void* h) {
  PyThreadState* ts;
  /* A release callback may run Python code: not with an exception set. */
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* exc = PyErr_GetRaisedException();
#else
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
#endif
  ts = PyEval_SaveThread();
  g_destroy(h);
  PyEval_RestoreThread(ts);
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(type, value, traceback);
#endif
}

static void TensorBase_dealloc(PyObject* self) {
  void* h = ((TensorBase*)self)->handle;
  ((TensorBase*)self)->handle = NULL;
  /* At interpreter exit the process is going away: the library need not release anything. */
  if (h != NULL && g_destroy != NULL && !is_finalizing()) release_quietly(h);
  Py_TYPE(self)->tp_free(self);
}

static PyObject* TensorBase_close(PyObject* self, PyObject* unused) {
  void* h = ((TensorBase*)self)->handle;
  int32_t status;
  (void)unused;
  if (h == NULL) Py_RETURN_NONE; /* idempotent */
  ((TensorBase*)self)->handle = NULL;
  {
    PyThreadState* ts = PyEval_SaveThread();
    status = g_destroy(h);
    PyEval_RestoreThread(ts);
  }
  if (status != 0) return speedups_fail(status, "dt_tensor_destroy");
  Py_RETURN_NONE;
}

static PyObject* TensorBase_enter(PyObject* self, PyObject* unused) {
  (void)unused;
  Py_INCREF(self);
  return self;
}

static PyObject* TensorBase_exit(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* r;
  (void)args;
  (void)nargs;
  r = TensorBase_close(self, NULL);
  if (r == NULL) return NULL;
  Py_DECREF(r);
  Py_RETURN_NONE; /* never swallows the block's exception */
}

/* redistribute(placements): a new tensor of the caller's type (made without running __init__). */
static PyObject* TensorBase_redistribute(PyObject* self, PyObject* placements) {
  void* out = NULL;
  int32_t status;
  PyObject* spec;
  PyObject* result;
  Py_ssize_t n;
  if (check_init() < 0) return NULL;
  spec = spec_of(placements);
  if (spec == NULL) return NULL;
  n = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 1));
  {
    void* h = ((TensorBase*)self)->handle;
    const char* raw = PyBytes_AS_STRING(PyTuple_GET_ITEM(spec, 0)); /* the cache keeps spec alive; so do we */
    PyThreadState* ts = PyEval_SaveThread(); /* it may wait for peers; ctypes releases the GIL too */
    status = g_redistribute(h, raw, (int32_t)n, &out);
    PyEval_RestoreThread(ts);
  }
  Py_DECREF(spec);
  if (status != 0) return speedups_fail(status, "dt_tensor_redistribute");
  result = Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
  if (result == NULL) {
    release_quietly(out);
    return NULL;
  }
  ((TensorBase*)result)->handle = out;
  return result;
}

static PyObject* TensorBase_get_handle(PyObject* self, void* closure) {
  (void)closure;
  return handle_object(((TensorBase*)self)->handle);
}

static PyMethodDef kTensorMethods[] = {
    {"close", TensorBase_close, METH_NOARGS,
     "Releases the handle (idempotent). Using the object afterwards raises InvalidHandleError."},
    {"redistribute", TensorBase_redistribute, METH_O,
     "A new DTensor with other placements (collective over the mesh; plans are cached)."},
    {"__enter__", TensorBase_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))TensorBase_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef kTensorGetSet[] = {
    {"handle", TensorBase_get_handle, NULL, "The raw C handle (an int), for other C API callers.", NULL},
    {"_h", TensorBase_get_handle, NULL, "The raw C handle, or None once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject kTensorBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)  // (the macro ends in a comma)
        .tp_name = "dtensor._speedups.TensorBase",
    .tp_basicsize = sizeof(TensorBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The compiled base of DTensor: a C API tensor handle, destroyed once (by close() or when collected).",
    .tp_new = TensorBase_new,
    .tp_init = TensorBase_init,
    .tp_dealloc = TensorBase_dealloc,
    .tp_methods = kTensorMethods,
    .tp_getset = kTensorGetSet,
};

/* ---- module functions ------------------------------------------------------------------------------------------ */

/* init(redistribute_address, destroy_address, raise_status) */
static PyObject* init(PyObject* self, PyObject* args) {
  unsigned long long r = 0, d = 0;
  PyObject* raiser = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "KKO", &r, &d, &raiser)) return NULL;
  if (r == 0 || d == 0 || !PyCallable_Check(raiser)) {
    PyErr_SetString(PyExc_ValueError, "_speedups.init: two function addresses and a callable");
    return NULL;
  }
  g_redistribute = (redistribute_fn)(uintptr_t)r;
  g_destroy = (destroy_fn)(uintptr_t)d;
  Py_INCREF(raiser);
  Py_XSETREF(g_raise, raiser);
  Py_RETURN_NONE;
}

/* set_placements(convert, placement_type): how TensorBase.redistribute converts a placements argument it has not
 * seen (convert(placements) -> (bytes, count)), and the class whose instances are cache keys on their own. */
static PyObject* set_placements(PyObject* self, PyObject* args) {
  PyObject* convert = NULL;
  PyObject* type = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "OO!", &convert, &PyType_Type, &type)) return NULL;
  if (!PyCallable_Check(convert)) {
    PyErr_SetString(PyExc_TypeError, "_speedups.set_placements: convert must be callable");
    return NULL;
  }
  Py_INCREF(convert);
  Py_XSETREF(g_convert, convert);
  Py_INCREF(type);
  Py_XSETREF(g_placement_type, type);
  PyDict_Clear(g_specs);
  Py_RETURN_NONE;
}

/* spec_cache_size(): the number of cached placement specs (for tests: the cache stays bounded). */
static PyObject* spec_cache_size(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  return PyLong_FromSsize_t(PyDict_GET_SIZE(g_specs));
}

/* bench_loop(handle, placements_bytes, n, calls): `calls` times dt_tensor_redistribute + dt_tensor_destroy, as a C
 * program makes them (holding the GIL, no Python in between): the baseline examples/python/call_overhead.py times
 * side by side with the same loop in Python. Not used by the package. */
static PyObject* bench_loop(PyObject* self, PyObject* args) {
  unsigned long long h = 0;
  const char* raw = NULL;
  Py_ssize_t len = 0;
  int n = 0;
  long long calls = 0, i;
  (void)self;
  if (!PyArg_ParseTuple(args, "Ky#iL", &h, &raw, &len, &n, &calls)) return NULL;
  if (g_redistribute == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "dtensor._speedups: init was not called");
    return NULL;
  }
  for (i = 0; i < calls; ++i) {
    void* out = NULL;
    int32_t status = g_redistribute((void*)(uintptr_t)h, raw, (int32_t)n, &out);
    if (status != 0) return speedups_fail(status, "dt_tensor_redistribute");
    status = g_destroy(out);
    if (status != 0) return speedups_fail(status, "dt_tensor_destroy");
  }
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"init", init, METH_VARARGS, "init(redistribute_address, destroy_address, raise_status)"},
    {"set_placements", set_placements, METH_VARARGS, "set_placements(convert, placement_type)"},
    {"spec_cache_size", spec_cache_size, METH_NOARGS, "spec_cache_size() -> int"},
    {"bench_loop", bench_loop, METH_VARARGS, "bench_loop(handle, placements_bytes, n, calls) (benchmark only)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "_speedups", "dtensor's optional fast paths", -1, kMethods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
  PyObject* m;
  if (PyType_Ready(&kTensorBaseType) < 0) return NULL;
  if (g_specs == NULL && (g_specs = PyDict_New()) == NULL) return NULL;
  m = PyModule_Create(&kModule);
  if (m == NULL) return NULL;
  Py_INCREF(&kTensorBaseType);
  if (PyModule_AddObject(m, "TensorBase", (PyObject*)&kTensorBaseType) < 0) {
    Py_DECREF(&kTensorBaseType);
    Py_DECREF(m);
    return NULL;
  }
  if (fsdp_hooks_add(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
