"""DeviceMesh for PyTorch code: dtensor's mesh with its dim names, read as torch.distributed.device_mesh.DeviceMesh.

init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")) joins the job the launcher started (dtrun, torchrun,
mpirun, srun) and returns a TorchMesh: mesh["tp"] is the 1-d sub-mesh through this rank, mesh.size(), mesh.ndim,
mesh.get_local_rank("dp"), mesh.get_group("dp") (what dtensor.torch.distributed's collectives take as group=).
"""
import dtensor


class TorchMesh:
    """A dtensor DeviceMesh with the names and methods PyTorch's DeviceMesh has. Sub-meshes are cached."""

    def __init__(self, mesh, dim_names, device_type):
        self.dt_mesh = mesh  # dtensor.DeviceMesh
        self.mesh_dim_names = tuple(dim_names)
        self.device_type = device_type
        self._shape = tuple(mesh.shape)
        self._coordinate = mesh.coordinate
        self._subs = {}
        if len(self.mesh_dim_names) != len(self._shape):
            raise ValueError(f"DeviceMesh: {len(self._shape)} dims but {len(self.mesh_dim_names)} names "
                             f"{self.mesh_dim_names}")

    # ---- PyTorch's DeviceMesh surface
    @property
    def ndim(self):
        return len(self._shape)

    @property
    def shape(self):
        return self._shape

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            total = 1
            for s in self._shape:
                total *= s
            return total
        return self._shape[self._dim_index(mesh_dim)]

    def get_local_rank(self, mesh_dim=None):
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError(f"DeviceMesh{self.mesh_dim_names}.get_local_rank(): name the dim of a {self.ndim}-d "
                                 f"mesh")
            mesh_dim = 0
        return self._coordinate[self._dim_index(mesh_dim)]

    def get_coordinate(self):
        return list(self._coordinate) if self._coordinate is not None else None

    def get_rank(self):
        return dtensor.get_world().rank

    def get_group(self, mesh_dim=None):
        """The 1-d sub-mesh of mesh_dim: dtensor.torch.distributed's group= argument."""
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError(f"DeviceMesh{self.mesh_dim_names}.get_group(): name the dim of a {self.ndim}-d mesh")
            return self
        return self[self.mesh_dim_names[self._dim_index(mesh_dim)]]

    def __getitem__(self, names):
        names = (names,) if isinstance(names, str) else tuple(names)
        for n in names:
            if n not in self.mesh_dim_names:
                raise KeyError(f"DeviceMesh: no dim named {n!r}; this mesh's dims are {self.mesh_dim_names} "
                               f"(shape {self._shape})")
        if names == self.mesh_dim_names:
            return self
        sub = self._subs.get(names)
        if sub is None:
            sub = TorchMesh(self.dt_mesh[names], names, self.device_type)
            sub._root = getattr(self, "_root", self)
            self._subs[names] = sub
        return sub

    def _dim_index(self, mesh_dim):
        if isinstance(mesh_dim, str):
            if mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"DeviceMesh: no dim named {mesh_dim!r}; this mesh's dims are {self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh{self.mesh_dim_names}: mesh dim {mesh_dim} out of range for {self.ndim} dims")
        return mesh_dim % self.ndim

    def __repr__(self):
        return f"DeviceMesh({self.device_type!r}, shape={self._shape}, mesh_dim_names={self.mesh_dim_names})"


_default_meshes = {}


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """PyTorch's init_device_mesh over dtensor's world (joined from the launcher's environment on first use)."""
    device_type = str(device_type)
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"init_device_mesh: device_type must be 'cpu' or 'cuda', got {device_type!r}")
    shape = (int(mesh_shape),) if isinstance(mesh_shape, int) else tuple(int(s) for s in mesh_shape)
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else tuple(f"dim{i}" for i in range(len(shape)))
    world = dtensor.init_process_group("nccl" if device_type == "cuda" else None)
    total = 1
    for s in shape:
        total *= s
    if total != world.size:
        raise ValueError(f"init_device_mesh: mesh shape {shape} holds {total} ranks but the world has {world.size}")
    device = device_type
    if device_type == "cuda":
        import torch
        device = f"cuda:{torch.cuda.current_device()}"
        # dtensor's work on this GPU (the engine's copies, the collectives' order against the caller's buffers)
        # queues on PyTorch's current stream, so that the tensors DLPack hands across are ready on both sides.
        dtensor.set_stream(device, torch.cuda.current_stream())
    return TorchMesh(dtensor.DeviceMesh(world, device, shape, names), names, device_type)


def default_mesh(device_type="cpu"):
    """The 1-d mesh over the whole world (fully_shard's mesh=None, the collectives' group=None)."""
    mesh = _default_meshes.get(device_type)
    if mesh is None:
        world = dtensor.init_process_group("nccl" if device_type == "cuda" else None)
        mesh = init_device_mesh(device_type, (world.size,), mesh_dim_names=("world",))
        _default_meshes[device_type] = mesh
    return mesh


def as_mesh(mesh, what):
    """A TorchMesh from what a caller passed (a TorchMesh; None: the default 1-d mesh); `what` names the caller."""
    if mesh is None:
        return default_mesh()
    if isinstance(mesh, TorchMesh):
        return mesh
    raise TypeError(f"{what}: mesh must be a dtensor.torch DeviceMesh (dtensor.torch.init_device_mesh), got "
                    f"{type(mesh).__module__}.{type(mesh).__name__}")
