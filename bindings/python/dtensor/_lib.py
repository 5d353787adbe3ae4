"""The C API through ctypes: loading libdtensor.so, the structs, every function's signature (one table), and the one
place where a status becomes a Python exception.

Nothing here is compiled: api/dtensor/c_api.h is the boundary. The library is the copy installed inside this package
(pip install), else the file $DTENSOR_LIBRARY names (a build tree: build/libdtensor.so).
"""
import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p)

from .errors import raise_for_status

_HERE = os.path.dirname(os.path.abspath(__file__))


def _preload_wheel_nccl():
    """Where PyTorch's NCCL wheel is installed (nvidia-nccl-cu*), load its libnccl.so.2 before libdtensor.so.

    A process holds one library per soname: whichever libnccl.so.2 loads first serves every later user. A CUDA build
    of libdtensor links the CUDA toolkit's NCCL; loaded first, it would serve torch too, which then fails to import
    (libtorch_cuda.so: undefined symbol ncclCommResume, a newer NCCL's). The wheel's NCCL is the newer one and keeps
    the older ABI (NCCL 2.x), so both libraries work over it, in either import order."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # libdtensor then loads its own NCCL; only a later torch import can mind
            return


def _load():
    _preload_wheel_nccl()
    candidates = []
    bundled = os.path.join(_HERE, "libdtensor.so")
    if os.path.exists(bundled):
        candidates.append(bundled)
    env = os.environ.get("DTENSOR_LIBRARY", "")
    if env:
        candidates.append(env)
    if not candidates:
        raise ImportError("dtensor: libdtensor.so was not found: it is neither installed inside the package (" +
                          bundled + ") nor named by $DTENSOR_LIBRARY. Install the package with "
                          "`pip install ./bindings/python` (it builds the library with Meson), or build it "
                          "(`./dev build libdtensor.so`) and set DTENSOR_LIBRARY=<build>/libdtensor.so")
    errors = []
    for path in candidates:
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("dtensor: cannot load libdtensor.so: " + "; ".join(errors))


lib = _load()

# ---- structs (api/dtensor/c_api.h, api/dtensor/dlpack.h) -------------------------------------------------------


class Device(Structure):
    _fields_ = [("type", c_int32), ("index", c_int32)]


class Placement(Structure):
    _fields_ = [("kind", c_int32), ("dim", c_int32), ("reduce_op", c_int32), ("order", c_int32)]


class Buffer(Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int32), ("ndim", c_int32), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("device", Device)]


RELEASE = CFUNCTYPE(None, c_void_p)


class InitParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("rank", c_int32), ("world_size", c_int32), ("store_host", c_char_p),
                ("store_port", c_int32), ("secret", c_char_p), ("insecure", c_int32), ("backend", c_char_p),
                ("local_rank", c_int32), ("store_hosted", c_int32)]


class NcclAdoptParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("timeout_s", c_double), ("may_abort", c_int32)]


class FromLocalParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("mode", c_int32), ("global_shape", POINTER(c_int64)),
                ("global_ndim", c_int32), ("run_check", c_int32), ("release", RELEASE), ("release_context", c_void_p)]


class OpParam(Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int32), ("i", c_int64), ("d", c_double), ("ints", POINTER(c_int64)),
                ("n_ints", c_int32), ("s", c_char_p)]


class FsdpOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("reshard_after_forward", c_int32), ("param_dtype", c_int32),
                ("reduce_dtype", c_int32), ("gradient_divide_factor", c_double), ("cpu_offload", c_int32)]


class FsdpMemory(Structure):
    _fields_ = [("struct_size", c_size_t), ("sharded_bytes", c_int64), ("unsharded_bytes", c_int64),
                ("unsharded_grad_bytes", c_int64), ("gather_buffer_bytes", c_int64), ("reduce_buffer_bytes", c_int64)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


class DLManagedTensor(Structure):  # pre-1.0 producers' tensors (from_dlpack wraps them)
    pass


DL_LEGACY_DELETER = CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DL_LEGACY_DELETER)]
DL_DELETER = CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DL_DELETER),
                                     ("flags", c_uint64), ("dl_tensor", DLTensor)]

# ---- codes -----------------------------------------------------------------------------------------------------

# Every enum of api/dtensor/c_api.h, mirrored here once (tests/bindings/c_api_drift.py checks each against the header;
# the status codes are the classes of errors.py).
OK = 0
# dt_dtype_t by PyTorch's / NumPy's name (core/dtype.h's long names).
DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int8": 4, "int32": 5, "int64": 6, "uint8": 7,
               "bool": 8}
DT_DEVICE_CPU, DT_DEVICE_CUDA = 1, 2
# dt_reduce_op_t by name.
REDUCE_OPS = {"sum": 0, "avg": 1, "max": 2, "min": 3, "product": 4}
DT_REPLICATE, DT_SHARD, DT_PARTIAL = 0, 1, 2
DT_COPY, DT_ZERO_COPY = 0, 1
DT_DLPACK_COPY, DT_DLPACK_READ_ONLY = 1, 2
DT_FSDP_UNSHARDED_PARAMS, DT_FSDP_SHARDED_GRADS = 0, 1  # dt_fsdp_export_t
PARAM_BOOL, PARAM_INT, PARAM_DOUBLE, PARAM_INTS, PARAM_STRING = 0, 1, 2, 3, 4

# ---- the function table: name -> (argtypes); every function returns dt_status_t unless listed in _RESTYPES --------

_h = c_void_p  # every handle is an opaque pointer
_p = POINTER
_SIGNATURES = {
    "dt_placements_parse": [c_char_p, c_int32, _p(Placement), c_int32, _p(c_int32)],
    "dt_placements_format": [_p(Placement), c_int32, c_char_p, c_size_t, _p(c_size_t)],
    "dt_init_from_env": [c_char_p, _p(_h)],
    "dt_init": [_p(InitParams), _p(_h)],
    "dt_comm_rank": [_h, _p(c_int32)],
    "dt_comm_size": [_h, _p(c_int32)],
    "dt_comm_barrier": [_h],
    "dt_comm_destroy": [_h],
    "dt_comm_from_nccl": [c_void_p, _p(NcclAdoptParams), _p(_h)],
    "dt_set_stream": [Device, c_void_p],
    "dt_get_stream": [Device, _p(c_void_p)],
    "dt_stream_wait": [Device, c_void_p],
    "dt_mesh_create": [_h, Device, _p(c_int64), c_int32, _p(c_char_p), _p(_h)],
    "dt_mesh_sub": [_h, _p(c_char_p), c_int32, _p(_h)],
    "dt_mesh_flatten": [_h, _p(c_char_p), c_int32, c_char_p, _p(_h)],
    "dt_mesh_ndim": [_h, _p(c_int32)],
    "dt_mesh_shape": [_h, _p(c_int64), c_int32],
    "dt_mesh_coordinate": [_h, _p(c_int64), c_int32],
    "dt_mesh_destroy": [_h],
    "dt_tensor_from_local": [_h, _p(Buffer), _p(Placement), c_int32, _p(FromLocalParams), _p(_h)],
    "dt_tensor_distribute": [_h, _p(Buffer), _p(Placement), c_int32, c_int32, _p(_h)],
    "dt_tensor_dtype": [_h, _p(c_int32)],
    "dt_tensor_ndim": [_h, _p(c_int32)],
    "dt_tensor_shape": [_h, _p(c_int64), c_int32],
    "dt_tensor_local_shape": [_h, _p(c_int64), c_int32],
    "dt_tensor_local_offset": [_h, _p(c_int64), c_int32],
    "dt_tensor_placements": [_h, _p(Placement), c_int32, _p(c_int32)],
    "dt_tensor_mesh": [_h, _p(_h)],
    "dt_tensor_local_data": [_h, _p(c_void_p)],
    "dt_tensor_to_local": [_h, _p(Buffer)],
    "dt_tensor_full": [_h, _p(Buffer)],
    "dt_tensor_redistribute": [_h, _p(Placement), c_int32, _p(_h)],
    "dt_tensor_redistribute_async": [_h, _p(Placement), c_int32, _p(_h)],
    "dt_tensor_describe": [_h, c_char_p, c_size_t, _p(c_size_t)],
    "dt_tensor_destroy": [_h],
    "dt_tensor_op": [c_char_p, _p(_h), c_int32, _p(OpParam), c_int32, _p(_h), c_int32, _p(c_int32)],
    "dt_ops_list": [c_char_p, c_size_t, _p(c_size_t)],
    "dt_work_wait": [_h, _p(_h)],
    "dt_work_test": [_h, _p(c_int32)],
    "dt_work_destroy": [_h],
    "dt_layout_block": [_p(c_int64), c_int32, _p(c_int64), c_int32, _p(Placement), _p(c_int64), _p(c_int64),
                        _p(c_int64)],
    "dt_plan_describe": [_p(c_int64), c_int32, _p(c_int64), c_int32, _p(Placement), _p(Placement), c_int32, c_char_p,
                         c_size_t, _p(c_size_t)],
    "dt_tensor_to_dlpack": [_h, c_uint32, _p(_p(DLManagedTensorVersioned))],
    "dt_tensor_from_dlpack": [_h, _p(DLManagedTensorVersioned), _p(Placement), c_int32, _p(FromLocalParams), c_uint32, _p(_h)],
    "dt_checkpoint_save": [c_char_p, _p(c_char_p), _p(_h), c_int32, c_char_p, _p(_h)],
    "dt_checkpoint_load": [c_char_p, _p(c_char_p), _p(_h), c_int32, c_int32, c_char_p, c_size_t, _p(c_size_t)],
    "dt_fsdp_group_create": [_h, c_char_p, _p(c_char_p), _p(_h), c_int32, _p(FsdpOptions), _p(_h)],
    "dt_fsdp_group_unshard": [_h, c_int32],
    "dt_fsdp_group_wait_unshard": [_h],
    "dt_fsdp_group_reshard": [_h, c_int32],
    "dt_fsdp_group_sharded_param": [_h, c_int32, _p(_h)],
    "dt_fsdp_group_unsharded_param": [_h, c_int32, _p(_h)],
    "dt_fsdp_group_accumulate_grad": [_h, c_int32, _h],
    "dt_fsdp_group_reduce_grads": [_h],
    "dt_fsdp_group_wait_reduce": [_h],
    "dt_fsdp_group_sharded_grad": [_h, c_int32, _p(_h)],
    "dt_fsdp_group_set_requires_gradient_sync": [_h, c_int32],
    "dt_fsdp_group_set_gradient_divide_factor": [_h, c_double],
    "dt_fsdp_group_memory": [_h, _p(FsdpMemory)],
    "dt_fsdp_group_unsharded_data": [_h, _p(c_void_p), c_int32],
    "dt_fsdp_group_export": [_h, c_int32, _p(_p(DLManagedTensorVersioned)), c_int32],
    "dt_fsdp_group_accumulate_grad_dlpack": [_h, c_int32, _p(DLManagedTensorVersioned)],
    "dt_fsdp_group_destroy": [_h],
    "dt_comm_debug_create": [_p(_h)],
    "dt_comm_debug_declare": [_h, c_char_p, c_int32],
    "dt_comm_debug_enter": [_h, c_char_p, c_int32],
    "dt_comm_debug_exit": [_h, c_char_p, c_int32],
    "dt_comm_debug_json": [_h, c_char_p, c_size_t, _p(c_size_t)],
    "dt_comm_debug_text": [_h, c_char_p, c_size_t, _p(c_size_t)],
    "dt_comm_debug_destroy": [_h],
}
# Functions that return something other than a status (no check).
_RESTYPES = {
    "dt_version": (c_uint32, []),
    "dt_version_string": (c_char_p, []),
    "dt_status_string": (c_char_p, [c_int32]),
    "dt_last_error": (c_char_p, []),
    "dt_cpu": (Device, []),
    "dt_cuda": (Device, [c_int32]),
    "dt_init_params_init": (None, [_p(InitParams)]),
    "dt_nccl_adopt_params_init": (None, [_p(NcclAdoptParams)]),
    "dt_from_local_params_init": (None, [_p(FromLocalParams)]),
    "dt_fsdp_options_init": (None, [_p(FsdpOptions)]),
}

for _name, (_res, _args) in _RESTYPES.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


def _errcheck(status, func, args):
    """The one place a status is checked: anything but DT_OK raises the matching dtensor.Error."""
    if status != OK:
        raise_for_status(status, lib.dt_last_error().decode("utf-8", "replace"), func.__name__)
    return status


for _name, _args in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes, _f.errcheck = c_int32, _args, _errcheck


def text_out(func, *args):
    """A string out of a (buf, cap, needed) call, sized by a first call."""
    needed = c_size_t(0)
    buf = ctypes.create_string_buffer(256)
    func(*args, buf, len(buf), ctypes.byref(needed))
    if needed.value > len(buf):
        buf = ctypes.create_string_buffer(needed.value)
        func(*args, buf, len(buf), ctypes.byref(needed))
    return buf.value.decode("utf-8")


def get_i32(func, handle):
    """An int32 out of a (handle, int32_t*) getter."""
    out = ctypes.c_int32()
    func(handle, ctypes.byref(out))
    return out.value


def to_device(device):
    """A dt_device_t from "cpu", "cuda", "cuda:i" (or a torch.device, whose str() reads so) or a Device."""
    if isinstance(device, Device):
        return device
    kind, _, index = str(device).partition(":")
    if kind == "cpu" and not index:
        return lib.dt_cpu()
    if kind == "cuda" and (not index or index.isdigit()):
        return lib.dt_cuda(int(index or 0))
    raise ValueError(f"dtensor: device must be 'cpu' or 'cuda[:i]', got {device!r}")


def int64_array(values):
    values = list(values)
    return (c_int64 * max(len(values), 1))(*values)


def cstr_array(strings):
    strings = [s.encode("utf-8") for s in strings]
    return (c_char_p * max(len(strings), 1))(*strings)



# ---- optional fast paths (_speedups.c): the same C functions called without ctypes --------------------------------


def _raise_status(status, function):
    raise_for_status(status, lib.dt_last_error().decode("utf-8", "replace"), function)


def load_speedups(always=False):
    """The compiled fast paths, when built (inside the package by pip, or the file $DTENSOR_SPEEDUPS names: the build
    tree's, for tests), handed this library's functions; None otherwise (ctypes serves every call), or when
    DTENSOR_NO_SPEEDUPS is set, unless `always` (a benchmark's C baseline)."""
    import importlib.util
    if os.environ.get("DTENSOR_NO_SPEEDUPS") and not always:
        return None
    module = None
    try:
        from . import _speedups as module  # noqa: F811
    except ImportError:
        path = os.environ.get("DTENSOR_SPEEDUPS", "")
        if path and os.path.exists(path):
            spec = importlib.util.spec_from_file_location("dtensor._speedups", path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
    if module is None:
        return None
    address = ctypes.cast(lib.dt_tensor_redistribute, c_void_p).value
    module.init(address, ctypes.cast(lib.dt_tensor_destroy, c_void_p).value, _raise_status)
    return module


speedups = load_speedups()
