"""DeviceMesh: an n-d grid of the world's ranks with named dims, one communicator per dim."""
import ctypes

from . import _lib
from ._handle import Handle
from .world import get_world


class DeviceMesh(Handle):
    """DeviceMesh(world or None, "cpu", (2, 2), ("dp", "tp")): ranks 0..n-1 of the world in row-major order.
    world None: the default world (joined from the launcher's environment on first use). Collective over the world.
    mesh["tp"] / mesh["dp", "tp"]: a sub-mesh through this rank; mesh.flatten(("dp", "tp")) merges dims."""
    _destroy = staticmethod(_lib.lib.dt_mesh_destroy)

    def __init__(self, world=None, device="cpu", shape=None, dim_names=None, *, _handle=None):
        if _handle is not None:
            super().__init__(_handle)
            return
        world = world if world is not None else get_world()
        if shape is None:
            shape = (world.size,)
        shape = tuple(int(s) for s in ((shape,) if isinstance(shape, int) else shape))
        names = _lib.cstr_array(dim_names) if dim_names is not None else None
        h = ctypes.c_void_p()
        _lib.lib.dt_mesh_create(world.handle, _lib.to_device(device), _lib.int64_array(shape), len(shape), names,
                                ctypes.byref(h))
        super().__init__(h.value)
        self._world = world  # the mesh's communicators live on; this only keeps the default world's object

    @property
    def ndim(self):
        return _lib.get_i32(_lib.lib.dt_mesh_ndim, self._h)

    @property
    def shape(self):
        n = self.ndim
        out = (ctypes.c_int64 * max(n, 1))()
        _lib.lib.dt_mesh_shape(self._h, out, n)
        return tuple(out[:n])

    @property
    def coordinate(self):
        """This rank's coordinate (None when it is not a member)."""
        n = self.ndim
        out = (ctypes.c_int64 * max(n, 1))()
        _lib.lib.dt_mesh_coordinate(self._h, out, n)
        coord = tuple(out[:n])
        return None if any(c < 0 for c in coord) else coord

    def size(self, dim=None):
        shape = self.shape
        if dim is None:
            total = 1
            for s in shape:
                total *= s
            return total
        return shape[dim]

    def __getitem__(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        h = ctypes.c_void_p()
        _lib.lib.dt_mesh_sub(self._h, _lib.cstr_array(names), len(names), ctypes.byref(h))
        return DeviceMesh(_handle=h.value)

    def flatten(self, names=None, new_name=None):
        """The named dims (default: all ... given explicitly) merged into one dim called new_name."""
        if names is None:
            raise ValueError("DeviceMesh.flatten: give the dims to merge, e.g. flatten(('dp', 'tp'))")
        names = (names,) if isinstance(names, str) else tuple(names)
        h = ctypes.c_void_p()
        _lib.lib.dt_mesh_flatten(self._h, _lib.cstr_array(names), len(names),
                                 new_name.encode() if new_name else None, ctypes.byref(h))
        return DeviceMesh(_handle=h.value)

    def __repr__(self):
        return f"DeviceMesh(shape={self.shape}, coordinate={self.coordinate})" if self._h else "DeviceMesh(closed)"
