"""torch tensors <-> dtensor DTensors (DLPack, zero copy), and the checks every entry point makes on its inputs."""
import torch

import dtensor


def check_device(tensor, mesh, what):
    """A clear error for a tensor on another device kind than the mesh (a CUDA tensor on a CPU mesh, ...)."""
    kind = tensor.device.type
    if kind != mesh.device_type:
        raise ValueError(f"{what}: a {kind} tensor on a {mesh.device_type} mesh (shape {tuple(tensor.shape)}, dtype "
                         f"{tensor.dtype}); move it with .to('{mesh.device_type}') or build the mesh for {kind}")


def to_dt(tensor, mesh, placements, shape=None):
    """A DTensor on `mesh` (a TorchMesh) whose block is `tensor` (zero copy when contiguous). shape: the global
    shape (None: the block's, for Replicate/Partial)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return dtensor.from_dlpack(tensor, mesh.dt_mesh, placements,
                               shape=tuple(tensor.shape) if shape is None else tuple(shape))


def to_torch(dt):
    """The block of a DTensor as a torch tensor (a DLPack view: no copy; it keeps the block alive)."""
    return torch.from_dlpack(dt)


def redistribute(tensor, mesh, src, dst, shape=None):
    """`tensor` as this rank's block in placements src, redistributed to dst: the new block as a torch tensor."""
    d = to_dt(tensor, mesh, src, shape)
    try:
        r = d.redistribute(dst)
    finally:
        d.close()
    try:
        return to_torch(r)
    finally:
        r.close()
