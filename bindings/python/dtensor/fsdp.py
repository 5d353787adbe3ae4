"""The FSDP engine's parameter group (PyTorch's FSDPParamGroup), for a host framework's own hooks."""
import ctypes

from . import _lib
from ._handle import Handle
from .tensor import DTensor, _dtype_code, owned_capsule, take_capsule

_MANAGED = ctypes.POINTER(_lib.DLManagedTensorVersioned)
_MANAGED_ARRAY = ctypes.POINTER(_MANAGED)


class FsdpParamGroup(Handle):
    """One group of parameters (DTensors replicated over the mesh) sharded on dim 0 over mesh (1-d: FSDP; 2-d: HSDP).

    A step calls, in order: unshard() -> wait_unshard() (before forward) -> reshard(post_forward=True) (after
    forward) -> unshard() + wait_unshard() (before backward) -> accumulate_grad(i, grad) per parameter ->
    reduce_grads() -> wait_reduce() -> reshard(). sharded_param(i) is what the optimizer updates, sharded_grad(i) its
    reduced gradient; unsharded_param(i) is the gathered value (its data address is the same every step).
    gradient_divide_factor None: the gradients are averaged over the data-parallel ranks."""
    _destroy = staticmethod(_lib.lib.dt_fsdp_group_destroy)

    def __init__(self, mesh, params, names=None, name="group", reshard_after_forward=True, param_dtype=None,
                 reduce_dtype=None, gradient_divide_factor=None, cpu_offload=False):
        params = list(params)
        opts = _lib.FsdpOptions()
        _lib.lib.dt_fsdp_options_init(ctypes.byref(opts))
        opts.reshard_after_forward = int(reshard_after_forward)
        if param_dtype is not None:
            opts.param_dtype = _dtype_code(param_dtype)
        if reduce_dtype is not None:
            opts.reduce_dtype = _dtype_code(reduce_dtype)
        if gradient_divide_factor is not None:
            opts.gradient_divide_factor = float(gradient_divide_factor)
        opts.cpu_offload = 1 if cpu_offload else 0
        handles = (ctypes.c_void_p * max(len(params), 1))(*[p.handle for p in params])
        h = ctypes.c_void_p()
        _lib.lib.dt_fsdp_group_create(mesh.handle, name.encode(), _lib.cstr_array(names) if names else None, handles,
                                      len(params), ctypes.byref(opts), ctypes.byref(h))
        super().__init__(h.value)
        self.num_params = len(params)
        self.names = list(names) if names else [str(i) for i in range(len(params))]

    def unshard(self, async_op=True):
        _lib.lib.dt_fsdp_group_unshard(self._h, 1 if async_op else 0)

    def wait_unshard(self):
        _lib.lib.dt_fsdp_group_wait_unshard(self._h)

    def reshard(self, post_forward=False):
        _lib.lib.dt_fsdp_group_reshard(self._h, 1 if post_forward else 0)

    def _tensor(self, func, i):
        h = ctypes.c_void_p()
        func(self._h, i, ctypes.byref(h))
        return DTensor(h.value) if h.value else None

    def sharded_param(self, i):
        return self._tensor(_lib.lib.dt_fsdp_group_sharded_param, i)

    def unsharded_param(self, i):
        return self._tensor(_lib.lib.dt_fsdp_group_unsharded_param, i)

    def sharded_grad(self, i):
        return self._tensor(_lib.lib.dt_fsdp_group_sharded_grad, i)

    def accumulate_grad(self, i, grad):
        _lib.lib.dt_fsdp_group_accumulate_grad(self._h, i, grad.handle)

    def reduce_grads(self):
        _lib.lib.dt_fsdp_group_reduce_grads(self._h)

    def wait_reduce(self):
        _lib.lib.dt_fsdp_group_wait_reduce(self._h)

    # ---- the batched hand-offs of a host framework's hooks (one call per group, no tensor handles)
    def unsharded_data(self):
        """After wait_unshard: every parameter's gathered data address (an int; None when empty), as a list."""
        out = (ctypes.c_void_p * max(self.num_params, 1))()
        _lib.lib.dt_fsdp_group_unsharded_data(self._h, out, self.num_params)
        return out[:self.num_params]

    def export(self, what):
        """Every parameter's gathered value ("unsharded_params", after wait_unshard) or reduced gradient shard
        ("sharded_grads", after wait_reduce; None where it got none), as DLPack capsules (torch.from_dlpack takes
        them; zero copy)."""
        code = {"unsharded_params": _lib.DT_FSDP_UNSHARDED_PARAMS, "sharded_grads": _lib.DT_FSDP_SHARDED_GRADS}[what]
        out = (ctypes.c_void_p * max(self.num_params, 1))()
        _lib.lib.dt_fsdp_group_export(self._h, code, ctypes.cast(out, _MANAGED_ARRAY), self.num_params)
        return [None if ptr is None else owned_capsule(ptr) for ptr in out[:self.num_params]]

    def accumulate_grad_dlpack(self, i, capsule):
        """Parameter i's unsharded gradient as an unused DLPack capsule of this rank's block (taken over)."""
        _lib.lib.dt_fsdp_group_accumulate_grad_dlpack(self._h, i, ctypes.cast(take_capsule(capsule), _MANAGED))

    def set_requires_gradient_sync(self, on):
        _lib.lib.dt_fsdp_group_set_requires_gradient_sync(self._h, 1 if on else 0)

    def set_gradient_divide_factor(self, factor=None):
        """The divide factor of the next reductions (None: the average over the data-parallel ranks; 1.0 sums)."""
        _lib.lib.dt_fsdp_group_set_gradient_divide_factor(self._h, 0.0 if factor is None else float(factor))

    def memory(self):
        m = _lib.FsdpMemory()
        m.struct_size = ctypes.sizeof(m)
        _lib.lib.dt_fsdp_group_memory(self._h, ctypes.byref(m))
        return {k: getattr(m, k) for k, _ in _lib.FsdpMemory._fields_[1:]}
