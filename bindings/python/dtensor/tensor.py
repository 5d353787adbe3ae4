"""DTensor: a local block plus (mesh, placements, global shape, dtype), with NumPy and DLPack in and out.

Zero copy rules (Note: the same in README.md):
- DTensor.from_local(arr, ..., copy=False) uses the C-contiguous NumPy array's memory in place and keeps the array
  alive until the library releases it (the release callback drops the reference).
- to_local() is a NumPy view of the local block through DLPack: it keeps the block's storage alive by itself, even
  after the DTensor is closed. Writing through it changes the tensor.
- __dlpack__ hands the block to DLPack consumers (torch.from_dlpack, numpy.from_dlpack) without a copy.
"""
import ctypes
import itertools
from functools import lru_cache

import numpy as np

from . import _lib
from ._handle import Handle
from .placements import Placement, default_orders, from_c, to_c
from .world import current_stream

lib = _lib.lib
_KDL_CUDA = 2  # DLDeviceType kDLCUDA
_speedups = _lib.speedups  # None without the compiled fast paths

# dt_dtype_t -> NumPy dtype and name, from the one table in _lib. bfloat16 has no NumPy type: its blocks are raw
# uint16 (torch reads them as bf16).
_BF16 = _lib.DTYPE_CODES["bfloat16"]
_DT_NAMES = {code: name for name, code in _lib.DTYPE_CODES.items()}
_NP_DTYPES = {code: np.dtype(np.uint16 if code == _BF16 else name) for name, code in _lib.DTYPE_CODES.items()}
_DT_OF_NP = {v: k for k, v in _NP_DTYPES.items() if k != _BF16}


def _dtype_code(dtype):
    """A dt_dtype_t from a NumPy dtype or a name ("bfloat16" reads uint16 data as bf16)."""
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return _BF16
    try:
        return _DT_OF_NP[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"dtensor: dtype {dtype} is not supported ({', '.join(_lib.DTYPE_CODES)}; bfloat16 data as "
                        f"uint16)") from None


def _buffer(arr, dtype=None):
    """A dt_buffer_t over a NumPy array (C-contiguous, or with its strides), and the arrays it points into."""
    code = _dtype_code(dtype if dtype is not None else arr.dtype)
    if code == _BF16 and arr.dtype != np.uint16:
        raise TypeError(f"dtensor: bfloat16 data must be given as uint16, got {arr.dtype}")
    shape = _lib.int64_array(arr.shape)
    strides = None
    if not arr.flags.c_contiguous:
        if any(s % arr.itemsize for s in arr.strides):
            raise ValueError("dtensor: array strides are not multiples of the item size")
        strides = _lib.int64_array(s // arr.itemsize for s in arr.strides)
    buf = _lib.Buffer(arr.ctypes.data if arr.size else None, code, arr.ndim, shape, strides, lib.dt_cpu())
    return buf, (shape, strides, arr)


def _convert(placements):
    arr, n = to_c(placements)
    return arr, n


# Bounded like _speedups.c's cache, and keyed alike: placements hash and compare in C (Note [Interned placements]).
_convert_cached = lru_cache(maxsize=256)(_convert)


def _spec(placements):
    """(ctypes array, count) for placements, cached per spec: redistribute in a loop converts nothing. The keys are
    those of _speedups.c's spec_key: a list (as a tuple), a tuple, a str or one Placement; anything else is converted
    each time."""
    if type(placements) is list:
        placements = tuple(placements)
    elif type(placements) not in (tuple, str) and not isinstance(placements, Placement):
        return _convert(placements)
    try:
        return _convert_cached(placements)
    except TypeError:  # unhashable
        return _convert(placements)


def _spec_bytes(placements):
    """(the dt_placement_t array as bytes, count): how _speedups.c converts placements it has not cached."""
    arr, n = _convert(placements)
    return bytes(arr), n


if _speedups is not None:
    _speedups.set_placements(_spec_bytes, Placement)


# ---- zero copy: NumPy arrays kept alive until the library releases them -------------------------------------------

_kept = {}
_next_key = itertools.count(1)


def _release(context):
    _kept.pop(context, None)


_RELEASE = _lib.RELEASE(_release)

# ---- DLPack capsules ----------------------------------------------------------------------------------------------

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype, _api.PyCapsule_New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                             _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype, _api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
# Raw PyObject* arguments (capsule destructors get one during deallocation: no new references may be made there).
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_VERSIONED = b"dltensor_versioned"
_USED_VERSIONED = b"used_dltensor_versioned"
_LEGACY = b"dltensor"
_USED_LEGACY = b"used_dltensor"


def _capsule_destructor(capsule):
    # A consumer renames the capsule when it takes the tensor; only an unconsumed one still owns it.
    if _api.PyCapsule_IsValid(capsule, _VERSIONED):
        ptr = _capsule_pointer(capsule, _VERSIONED)
        m = ctypes.cast(ptr, ctypes.POINTER(_lib.DLManagedTensorVersioned))
        m.contents.deleter(m)


_DESTRUCTOR = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def owned_capsule(ptr):
    """A "dltensor_versioned" capsule over a DLManagedTensorVersioned* the caller owned: its consumer
    (torch.from_dlpack) takes it, or the capsule's destructor releases it."""
    return _api.PyCapsule_New(ptr, _VERSIONED, _DESTRUCTOR)


def take_capsule(capsule):
    """The DLManagedTensorVersioned* of a producer's capsule, now owned by the caller (the capsule is marked used).
    A pre-1.0 capsule ("dltensor") is wrapped into a versioned tensor whose deleter calls the old one."""
    raw = id(capsule)  # capsule stays referenced by the caller for the whole call
    if _api.PyCapsule_IsValid(raw, _VERSIONED):
        ptr = _capsule_pointer(raw, _VERSIONED)
        _capsule_set_name(raw, _USED_VERSIONED)
        return ptr
    if _api.PyCapsule_IsValid(raw, _LEGACY):
        ptr = _capsule_pointer(raw, _LEGACY)
        _capsule_set_name(raw, _USED_LEGACY)
        return _wrap_legacy(ptr)
    raise TypeError("dtensor.from_dlpack: __dlpack__ returned no unused 'dltensor_versioned' or 'dltensor' capsule")


_DLManagedTensor = _lib.DLManagedTensor  # a pre-1.0 DLPack tensor
_LEGACY_DELETER = _lib.DL_LEGACY_DELETER
_wrapped = {}


def _legacy_done(m):
    addr = ctypes.addressof(m.contents)
    legacy = _wrapped.pop(addr, None)
    _kept.pop(("legacy", addr), None)
    if legacy is not None and legacy.contents.deleter:
        legacy.contents.deleter(legacy)


_LEGACY_DONE = _lib.DL_DELETER(_legacy_done)


def _wrap_legacy(ptr):
    legacy = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
    v = _lib.DLManagedTensorVersioned()
    v.version = _lib.DLPackVersion(1, 0)
    v.deleter = _LEGACY_DONE
    v.dl_tensor = legacy.contents.dl_tensor
    _wrapped[ctypes.addressof(v)] = legacy
    _kept[("legacy", ctypes.addressof(v))] = v  # the struct itself lives until its deleter runs
    return ctypes.addressof(v)


class _DLPackArray:
    """Owns one exported DLManagedTensorVersioned and presents it to NumPy (__array_interface__); the deleter runs
    when the last NumPy view of it goes away."""

    def __init__(self, managed, np_dtype):
        self._m = managed
        t = managed.contents.dl_tensor
        shape = tuple(t.shape[i] for i in range(t.ndim))
        self.__array_interface__ = {"data": (t.data or 0, False), "shape": shape,
                                    "typestr": np.dtype(np_dtype).str, "version": 3}

    def __del__(self):
        m, self._m = self._m, None
        if m:
            m.contents.deleter(m)


# ---- DTensor -------------------------------------------------------------------------------------------------------


def _from_local_params(shape, run_check):
    """dt_from_local_params_t: the global shape (None: inferred, collective) and the layout check."""
    params = _lib.FromLocalParams()
    lib.dt_from_local_params_init(ctypes.byref(params))
    if shape is not None:
        params.global_shape, params.global_ndim = _lib.int64_array(shape), len(tuple(shape))  # ctypes keeps it alive
    params.run_check = 1 if run_check else 0
    return params


def _new_handle():
    return ctypes.c_void_p()


# With the compiled fast paths, DTensor's handle, close(), release when collected, `with` and redistribute() are
# _speedups.TensorBase's (C); without them, Handle's and the ctypes redistribute below. Both behave the same.
_TensorBase = _speedups.TensorBase if _speedups is not None else Handle


class DTensor(_TensorBase):
    """A distributed tensor. Made by distribute_tensor, DTensor.from_local, from_dlpack, ops and redistribute."""
    _destroy = staticmethod(lib.dt_tensor_destroy)  # Handle's (the ctypes path)

    # ---- construction
    @staticmethod
    def from_local(local, mesh, placements, shape=None, copy=False, run_check=False, dtype=None):
        """A DTensor from this rank's block (PyTorch's DTensor.from_local). local: a NumPy array (or anything with
        __dlpack__, e.g. a torch tensor: then through DLPack). shape: the global shape (None: inferred from every
        rank's block, collective). copy=False: zero copy, the array's memory is used in place and kept alive (it must
        be C-contiguous); copy=True: the library copies it."""
        if not isinstance(local, np.ndarray) and hasattr(local, "__dlpack__"):
            return from_dlpack(local, mesh, placements, shape=shape, copy=copy, run_check=run_check)
        local = np.asarray(local)
        spec, n = _spec(placements)
        buf, keep = _buffer(local, dtype)
        params = _from_local_params(shape, run_check)
        key = None
        if not copy:
            if not local.flags.c_contiguous:
                raise ValueError("DTensor.from_local(copy=False): the array must be C-contiguous "
                                 "(np.ascontiguousarray, or copy=True)")
            key = next(_next_key)
            _kept[key] = local
            params.mode, params.release, params.release_context = _lib.DT_ZERO_COPY, _RELEASE, key
        h = _new_handle()
        try:
            lib.dt_tensor_from_local(mesh.handle, ctypes.byref(buf), spec, n, ctypes.byref(params), ctypes.byref(h))
        except BaseException:
            if key is not None:
                _kept.pop(key, None)
            raise
        return DTensor(h.value)

    # ---- metadata
    def _ints(self, func, n=None):
        n = self.ndim if n is None else n
        out = (ctypes.c_int64 * max(n, 1))()
        func(self._h, out, n)
        return tuple(out[:n])

    @property
    def ndim(self):
        return _lib.get_i32(lib.dt_tensor_ndim, self._h)

    @property
    def shape(self):
        """The global shape."""
        return self._ints(lib.dt_tensor_shape)

    @property
    def local_shape(self):
        return self._ints(lib.dt_tensor_local_shape)

    @property
    def local_offset(self):
        return self._ints(lib.dt_tensor_local_offset)

    @property
    def dtype_code(self):
        return _lib.get_i32(lib.dt_tensor_dtype, self._h)

    @property
    def dtype(self):
        """The NumPy dtype of the blocks (uint16 for bfloat16: see dtype_name)."""
        return np.dtype(_NP_DTYPES[self.dtype_code])

    @property
    def dtype_name(self):
        return _DT_NAMES[self.dtype_code]

    @property
    def placements(self):
        out = (_lib.Placement * 16)()
        n = ctypes.c_int32()
        lib.dt_tensor_placements(self._h, out, 16, ctypes.byref(n))
        return default_orders([from_c(out[i]) for i in range(n.value)])

    @property
    def device_mesh(self):
        from .mesh import DeviceMesh
        h = _new_handle()
        lib.dt_tensor_mesh(self._h, ctypes.byref(h))
        return DeviceMesh(_handle=h.value)

    mesh = device_mesh

    @property
    def local_data_ptr(self):
        """The address of this rank's block (valid while the tensor lives)."""
        p = ctypes.c_void_p()
        lib.dt_tensor_local_data(self._h, ctypes.byref(p))
        return p.value or 0

    # ---- data out
    def to_local(self, copy=False):
        """This rank's block as a NumPy array: a view without a copy (it keeps the block alive on its own), or a
        copy with copy=True."""
        m = ctypes.POINTER(_lib.DLManagedTensorVersioned)()
        lib.dt_tensor_to_dlpack(self._h, _lib.DT_DLPACK_COPY if copy else 0, ctypes.byref(m))
        if m.contents.dl_tensor.device.device_type != 1:  # kDLCPU
            m.contents.deleter(m)
            raise TypeError("DTensor.to_local(): the block is in device memory, which NumPy cannot view; use "
                            "torch.from_dlpack(dtensor)")
        owner = _DLPackArray(m, _NP_DTYPES[self.dtype_code])
        if not owner.__array_interface__["data"][0]:  # an empty block: NumPy wants an address; nothing to view
            return np.empty(owner.__array_interface__["shape"], _NP_DTYPES[self.dtype_code])
        return np.asarray(owner)

    def full_tensor(self):
        """The whole tensor on every rank, as a new NumPy array (collective over the mesh)."""
        out = np.empty(self.shape, _NP_DTYPES[self.dtype_code])
        buf, _keep = _buffer(out, "bfloat16" if self.dtype_code == _BF16 else None)
        lib.dt_tensor_full(self._h, ctypes.byref(buf))
        return out

    def numpy(self):
        return self.to_local()

    # ---- redistribution
    if _speedups is None:  # else TensorBase.redistribute: the same call in C
        def redistribute(self, placements):
            """A new DTensor with other placements (collective over the mesh; plans are cached)."""
            spec, n = _spec(placements)
            h = ctypes.c_void_p()
            lib.dt_tensor_redistribute(self._h, spec, n, h)  # ctypes passes h by reference (POINTER argtype)
            t = type(self).__new__(type(self))  # the caller's type, without __init__ (as TensorBase does)
            t._h = h.value
            return t

    def redistribute_async(self, placements):
        """The same, asynchronous: returns a Work whose wait() yields the DTensor (ranks wait in the same order)."""
        spec, n = _spec(placements)
        h = ctypes.c_void_p()
        lib.dt_tensor_redistribute_async(self._h, spec, n, ctypes.byref(h))
        return Work(h.value)

    # ---- DLPack
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        m = ctypes.POINTER(_lib.DLManagedTensorVersioned)()
        lib.dt_tensor_to_dlpack(self._h, _lib.DT_DLPACK_COPY if copy else 0, ctypes.byref(m))
        ptr = ctypes.cast(m, ctypes.c_void_p).value
        d = m.contents.dl_tensor.device
        if d.device_type == _KDL_CUDA and stream != -1:
            # The DLPack protocol: the consumer's stream (None or 1: the legacy default stream, 2: the per-thread
            # default stream, else a cudaStream_t) must see the block ready; -1 asks for no ordering.
            try:
                lib.dt_stream_wait(lib.dt_cuda(d.device_id), 1 if stream is None else stream)
            except BaseException:
                m.contents.deleter(m)
                raise
        if max_version is not None and max_version[0] >= 1:
            return owned_capsule(ptr)
        return _legacy_capsule(m)

    def __dlpack_device__(self):
        m = ctypes.POINTER(_lib.DLManagedTensorVersioned)()
        lib.dt_tensor_to_dlpack(self._h, 0, ctypes.byref(m))
        d = m.contents.dl_tensor.device
        result = (d.device_type, d.device_id)
        m.contents.deleter(m)
        return result

    # a + b, a - b, a * b, a @ b: dtensor.ops sets them (one definition per op)

    def describe(self):
        return _lib.text_out(lib.dt_tensor_describe, self._h)

    def __repr__(self):
        return self.describe() if self._h else "DTensor(closed)"


# Pre-1.0 consumers get a "dltensor" capsule: a DLManagedTensor in Python memory whose deleter calls the versioned one.
_legacy_live = {}


def _legacy_release(m):
    versioned = _legacy_live.pop(ctypes.addressof(m.contents), None)
    if versioned is not None:
        versioned[0].contents.deleter(versioned[0])


_LEGACY_RELEASE = _LEGACY_DELETER(_legacy_release)


def _legacy_destructor(capsule):
    if _api.PyCapsule_IsValid(capsule, _LEGACY):
        ptr = _capsule_pointer(capsule, _LEGACY)
        _legacy_release(ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor)))


_LEGACY_DESTRUCTOR = _CAPSULE_DESTRUCTOR(_legacy_destructor)


def _legacy_capsule(versioned):
    old = _DLManagedTensor()
    old.dl_tensor = versioned.contents.dl_tensor
    old.deleter = _LEGACY_RELEASE
    _legacy_live[ctypes.addressof(old)] = (versioned, old)
    return _api.PyCapsule_New(ctypes.addressof(old), _LEGACY, _LEGACY_DESTRUCTOR)


class Work(Handle):
    """An asynchronous call in flight: wait() (once) yields its DTensor (None for a save); test() polls."""
    _destroy = staticmethod(lib.dt_work_destroy)

    def wait(self):
        h = ctypes.c_void_p()
        lib.dt_work_wait(self._h, ctypes.byref(h))
        return DTensor(h.value) if h.value else None

    def test(self):
        done = ctypes.c_int32()
        lib.dt_work_test(self._h, ctypes.byref(done))
        return bool(done.value)


def distribute_tensor(tensor, mesh, placements, src_rank=None, *, shape=None, dtype=None):
    """PyTorch's distribute_tensor: every rank passes the full NumPy array (src_rank None: each slices its block), or
    the global rank src_rank sends each rank its block (the others may pass None with shape= and dtype=)."""
    spec, n = _spec(placements)
    if tensor is None:
        if shape is None or dtype is None:
            raise ValueError("distribute_tensor: a rank passing None must give shape= and dtype=")
        code = _dtype_code(dtype)
        keep = _lib.int64_array(shape)
        buf = _lib.Buffer(None, code, len(tuple(shape)), keep, None, lib.dt_cpu())
    else:
        buf, keep = _buffer(np.asarray(tensor), dtype)
    h = ctypes.c_void_p()
    lib.dt_tensor_distribute(mesh.handle, ctypes.byref(buf), spec, n, -1 if src_rank is None else src_rank,
                             ctypes.byref(h))
    return DTensor(h.value)


def producer_capsule(obj):
    """A DLPack producer's capsule of its tensor (1.x when it makes one), by the protocol: a CUDA producer orders its
    work before this thread's current stream, where dtensor works."""
    kwargs = {}
    device = getattr(obj, "__dlpack_device__", lambda: (1, 0))()
    if device[0] == _KDL_CUDA:
        kwargs["stream"] = current_stream(f"cuda:{device[1]}") or 1
    try:
        return obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:
        return obj.__dlpack__(**kwargs)


def from_dlpack(obj, mesh, placements, shape=None, copy=False, run_check=False):
    """A DTensor whose local block is a DLPack producer's tensor (a torch tensor, a NumPy array), zero copy unless
    copy=True or the tensor is not contiguous or read-only. A torch tensor that requires grad is detached."""
    if hasattr(obj, "detach") and getattr(obj, "requires_grad", False):
        obj = obj.detach()
    ptr = take_capsule(producer_capsule(obj))
    spec, n = _spec(placements)
    params = _from_local_params(shape, run_check)
    h = ctypes.c_void_p()
    ptr = ctypes.cast(ptr, ctypes.POINTER(_lib.DLManagedTensorVersioned))
    lib.dt_tensor_from_dlpack(mesh.handle, ptr, spec, n, ctypes.byref(params), _lib.DT_DLPACK_COPY if copy else 0,
                              ctypes.byref(h))
    return DTensor(h.value)


def _op_params(params):
    out = (_lib.OpParam * max(len(params), 1))()
    keep = []
    for i, (name, v) in enumerate(params.items()):
        p = out[i]
        p.name = name.encode()
        keep.append(p.name)
        if isinstance(v, (bool, np.bool_)):
            p.kind, p.i = _lib.PARAM_BOOL, int(bool(v))
        elif isinstance(v, (int, np.integer)):
            p.kind, p.i = _lib.PARAM_INT, int(v)
        elif isinstance(v, (float, np.floating)):
            p.kind, p.d = _lib.PARAM_DOUBLE, float(v)
        elif isinstance(v, str):
            p.kind, p.s = _lib.PARAM_STRING, v.encode()
        elif isinstance(v, (list, tuple)):
            arr = _lib.int64_array(int(x) for x in v)
            keep.append(arr)
            p.kind, p.ints, p.n_ints = _lib.PARAM_INTS, arr, len(v)
        else:
            raise TypeError(f"dtensor.op: parameter {name!r}: expected bool, int, float, str or a list of ints, "
                            f"got {type(v).__name__}")
    return out, len(params), keep


def op(name, *inputs, **params):
    """Runs a registered op ("add", "matmul", "sum", ...; ops_list() names them) with sharding propagation. Returns
    one DTensor, or a tuple when the op has several outputs."""
    for i, x in enumerate(inputs):
        if not isinstance(x, DTensor):
            raise TypeError(f"dtensor.op({name!r}): input {i} must be a DTensor, got {type(x).__name__}")
    ins = (ctypes.c_void_p * max(len(inputs), 1))(*[x.handle for x in inputs])
    ps, n_params, _keep = _op_params(params)
    outs = (ctypes.c_void_p * 16)()
    n_out = ctypes.c_int32()
    lib.dt_tensor_op(name.encode(), ins, len(inputs), ps, n_params, outs, 16, ctypes.byref(n_out))
    res = tuple(DTensor(outs[i]) for i in range(n_out.value))
    return res[0] if len(res) == 1 else res


def ops_list():
    return _lib.text_out(lib.dt_ops_list).split(",")


def layout_block(shape, mesh_shape, placements, coordinate):
    """(local shape, offset) of the block at `coordinate` (no communication, no world)."""
    spec, n = _spec(placements)
    nd = len(tuple(shape))
    ls, off = (ctypes.c_int64 * max(nd, 1))(), (ctypes.c_int64 * max(nd, 1))()
    lib.dt_layout_block(_lib.int64_array(shape), nd, _lib.int64_array(mesh_shape), len(tuple(mesh_shape)), spec,
                        _lib.int64_array(coordinate), ls, off)
    return tuple(ls[:nd]), tuple(off[:nd])


def plan_describe(shape, mesh_shape, src, dst, dtype=np.float32):
    a, _ = _spec(src)
    b, _ = _spec(dst)
    return _lib.text_out(lib.dt_plan_describe, _lib.int64_array(shape), len(tuple(shape)), _lib.int64_array(mesh_shape),
                         len(tuple(mesh_shape)), a, b, _dtype_code(dtype))
