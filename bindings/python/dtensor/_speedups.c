/* Optional fast paths for the hottest calls (redistribute, destroy), as a CPython extension over the same C API.
 *
 * It links nothing of dtensor's: _lib.py hands it the addresses of the C functions of the library ctypes already
 * loaded (so there is one library, one handle registry), and the Python callable that turns a status into an
 * exception (so errors are raised exactly as on the ctypes path). Without it the package uses ctypes for everything;
 * with it a redistribute + destroy skips two ctypes calls (about 1 us each). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The C API's signatures, with its opaque handle types as void* (the same ABI). */
typedef int32_t (*redistribute_fn)(void* t, const void* placements, int32_t n, void** out);
typedef int32_t (*destroy_fn)(void* t);

static redistribute_fn g_redistribute = NULL;
static destroy_fn g_destroy = NULL;
static PyObject* g_raise = NULL; /* raise_status(status, function_name): raises the matching dtensor.Error */

static PyObject* fail(int32_t status, const char* function) {
  PyObject* r = PyObject_CallFunction(g_raise, "is", (int)status, function);
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%s failed with status %d", function, (int)status);
  return NULL;
}

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
  Py_XDECREF(g_raise);
  Py_INCREF(raiser);
  g_raise = raiser;
  Py_RETURN_NONE;
}

/* redistribute(handle, placements_bytes, n) -> new handle */
static PyObject* redistribute(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  void* out = NULL;
  int32_t status;
  (void)self;
  if (nargs != 3 || !PyBytes_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "redistribute(handle, placements: bytes, n)");
    return NULL;
  }
  if (g_redistribute == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "_speedups.init was not called");
    return NULL;
  }
  {
    const uint64_t h = PyLong_AsUnsignedLongLong(args[0]);
    const long n = PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    status = g_redistribute((void*)(uintptr_t)h, PyBytes_AS_STRING(args[1]), (int32_t)n, &out);
  }
  if (status != 0) return fail(status, "dt_tensor_redistribute");
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)out);
}

/* destroy(handle) */
static PyObject* destroy(PyObject* self, PyObject* arg) {
  int32_t status;
  uint64_t h;
  (void)self;
  if (g_destroy == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "_speedups.init was not called");
    return NULL;
  }
  h = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return NULL;
  status = g_destroy((void*)(uintptr_t)h);
  if (status != 0) return fail(status, "dt_tensor_destroy");
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"init", init, METH_VARARGS, "init(redistribute_address, destroy_address, raise_status)"},
    {"redistribute", (PyCFunction)(void (*)(void))redistribute, METH_FASTCALL, "redistribute(handle, placements, n)"},
    {"destroy", destroy, METH_O, "destroy(handle)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_speedups", "dtensor's optional fast paths", -1, kMethods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&kModule); }
