/* What the compiled fast paths' files share: the error path and the FSDP hooks' registration (_fsdp_hooks.c). */
#ifndef DTENSOR_PY_SPEEDUPS_H
#define DTENSOR_PY_SPEEDUPS_H

#include <Python.h>
#include <stdint.h>

/* Raises the dtensor.Error of a C API status (through the Python callable init() was given); returns NULL. */
PyObject* speedups_fail(int32_t status, const char* function);

/* Adds FsdpGroupBase, FsdpStateBase, RegistryBase, fsdp_call and fsdp_setup to the module; -1 on error. */
int fsdp_hooks_add(PyObject* module);

#endif
