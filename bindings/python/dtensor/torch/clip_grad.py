"""clip_grad_norm_ over sharded parameters: the norm of the whole model's gradient, not of this rank's shards.

torch.nn.utils.clip_grad_norm_ on the local shards would clip each rank by its own shards' norm (silently wrong);
this one sums each gradient's squares on its rank, weighted by 1 / (the number of ranks holding the same block), and
all-reduces the sum over the world, so every block counts once whatever its layout (FSDP, HSDP, TP, replicated).
"""
import math

import torch

import dtensor
from . import collectives
from .mesh import default_mesh

def _replica_count(p, world_size):
    """How many ranks hold the same block of p (kept on the parameter: its layout does not change)."""
    n = getattr(p, "_dt_replicas", None)
    if n is not None:
        return n
    from .state_dict import _as_dtensor
    d = _as_dtensor(p)
    try:
        shape, placements = d.device_mesh.shape, d.placements
    finally:
        d.close()
    distinct = 1
    for size, placement in zip(shape, placements):
        if isinstance(placement, dtensor.Shard):
            distinct *= size
    n = world_size // distinct
    p._dt_replicas = n
    return n


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so that the norm of the whole model's gradient is at most max_norm; returns that
    norm (a 0-d tensor, the same on every rank). Collective over the world: every rank calls it."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    world = dtensor.get_world().size
    norm_type = float(norm_type)
    device = grads[0].device if grads else torch.device("cpu")
    total = torch.zeros(1, dtype=torch.float64, device=device)
    if norm_type == math.inf:
        for p in params:
            if p.grad is not None and p.grad.numel():
                total = torch.maximum(total, p.grad.detach().abs().max().to(torch.float64).reshape(1))
        collectives.all_reduce(total, "max", default_mesh(device.type))
        norm = total[0]
    else:
        for p in params:
            if p.grad is not None and p.grad.numel():
                part = p.grad.detach().to(torch.float64).abs().pow(norm_type).sum()
                total += part / _replica_count(p, world)
        collectives.all_reduce(total, "sum", default_mesh(device.type))
        norm = total[0] ** (1.0 / norm_type)
    if error_if_nonfinite and not torch.isfinite(norm):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} is {norm.item()}")
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return norm.to(grads[0].dtype if grads else torch.float32)
