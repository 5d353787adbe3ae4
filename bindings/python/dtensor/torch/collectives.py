"""Collectives on torch tensors over one mesh dim (for losses, metrics and tensor parallelism), through dtensor's
redistributions: a block and two placements on a 1-d mesh are exactly a collective.

    all_reduce(t, group)                  Partial(op) -> Replicate       (in place, as torch.distributed)
    all_gather_into_tensor(out, t, group) Shard(0)    -> Replicate
    reduce_scatter_tensor(out, t, group)  Partial(op) -> Shard(0)
    broadcast(t, src, group)              the others' blocks zero, Partial(sum) -> Replicate
    all_to_all_single(out, t, group)      (k, k, c): Shard(0) -> Shard(1) (uneven splits: padded)
    barrier(group)

group: a 1-d dtensor.torch mesh (mesh["dp"], mesh.get_group("dp")) or a mesh and a dim (mesh=, mesh_dim=); None:
the whole world. Ranks call them in the same order, as torch.distributed's. The blocks go in and out through
DLPack without copies; the result is copied into the caller's tensor (the in-place contract of torch.distributed).
"""
import torch

import dtensor
from . import _convert
from .mesh import TorchMesh, default_mesh

REDUCE_OPS = ("sum", "avg", "max", "min", "product")


def resolve_group(group, what, mesh_dim=None, tensor=None):
    """The 1-d TorchMesh a collective runs on: group (a 1-d mesh, or a mesh with mesh_dim), None: the world (a mesh of
    the tensor's device kind)."""
    if group is None:
        return default_mesh(tensor.device.type if tensor is not None and tensor.device.type == "cuda" else "cpu")
    if not isinstance(group, TorchMesh):
        raise TypeError(f"{what}: group must be a dtensor.torch mesh (mesh['dp'] or mesh.get_group('dp')), got "
                        f"{type(group).__module__}.{type(group).__name__}")
    if mesh_dim is not None:
        return group.get_group(mesh_dim)
    if group.ndim != 1:
        raise ValueError(f"{what}: group is a {group.ndim}-d mesh {group.mesh_dim_names}; pass one dim "
                         f"(mesh['{group.mesh_dim_names[0]}'] or mesh_dim=)")
    return group


def _op_name(op, what):
    name = getattr(op, "value", op)
    name = str(name).lower()
    if name not in REDUCE_OPS:
        raise ValueError(f"{what}: reduce op must be one of {REDUCE_OPS}, got {op!r}")
    return name


def all_reduce(tensor, op="sum", group=None, *, mesh_dim=None):
    """Reduces `tensor` over the group in place; returns it."""
    mesh = resolve_group(group, "all_reduce", mesh_dim, tensor)
    _convert.check_device(tensor, mesh, "all_reduce")
    if mesh.size() == 1:
        return tensor
    out = _convert.redistribute(tensor, mesh, [dtensor.Partial(_op_name(op, "all_reduce"))], [dtensor.Replicate()])
    with torch.no_grad():
        tensor.copy_(out)
    return tensor


def all_gather_into_tensor(output, input, group=None, *, mesh_dim=None):
    """output (k * rows, ...) receives every rank's input (rows, ...) in rank order."""
    mesh = resolve_group(group, "all_gather_into_tensor", mesh_dim, input)
    _convert.check_device(input, mesh, "all_gather_into_tensor")
    k = mesh.size()
    expected = (k * input.shape[0], *input.shape[1:]) if input.dim() else (k,)
    if tuple(output.shape) != expected:
        raise ValueError(f"all_gather_into_tensor: output shape {tuple(output.shape)}, expected {expected} (the "
                         f"input {tuple(input.shape)} from each of {k} ranks)")
    src = input if input.dim() else input.reshape(1)
    out = _convert.redistribute(src, mesh, [dtensor.Shard(0)], [dtensor.Replicate()], shape=expected)
    with torch.no_grad():
        output.copy_(out)
    return output


def reduce_scatter_tensor(output, input, op="sum", group=None, *, mesh_dim=None):
    """output (rows, ...) receives its rank's block of the reduction of every rank's input (k * rows, ...)."""
    mesh = resolve_group(group, "reduce_scatter_tensor", mesh_dim, input)
    _convert.check_device(input, mesh, "reduce_scatter_tensor")
    k = mesh.size()
    if input.dim() == 0 or input.shape[0] != k * output.shape[0] or input.shape[1:] != output.shape[1:]:
        raise ValueError(f"reduce_scatter_tensor: input shape {tuple(input.shape)} must be {k} times the output's "
                         f"{tuple(output.shape)} on dim 0")
    out = _convert.redistribute(input, mesh, [dtensor.Partial(_op_name(op, "reduce_scatter_tensor"))],
                                [dtensor.Shard(0)])
    with torch.no_grad():
        output.copy_(out)
    return output


def broadcast(tensor, src=0, group=None, *, mesh_dim=None):
    """Every rank's `tensor` becomes group rank `src`'s (in place; src counts within the group)."""
    mesh = resolve_group(group, "broadcast", mesh_dim, tensor)
    _convert.check_device(tensor, mesh, "broadcast")
    k = mesh.size()
    if not 0 <= src < k:
        raise ValueError(f"broadcast: src {src} is not a rank of a group of {k}")
    if k == 1:
        return tensor
    mine = tensor if mesh.get_local_rank() == src else torch.zeros_like(tensor)
    out = _convert.redistribute(mine, mesh, [dtensor.Partial("sum")], [dtensor.Replicate()])
    with torch.no_grad():
        tensor.copy_(out)
    return tensor


def all_to_all_single(output, input, group=None, *, output_split_sizes=None, input_split_sizes=None, mesh_dim=None):
    """Rank r's input rows for rank j (the j-th of input_split_sizes; None: dim 0 in k equal parts) go to rank j, which
    stores them at its output rows for rank r (the r-th of output_split_sizes; None: equal parts). Uneven splits are
    padded to the largest one anywhere: one all-to-all of the counts (checked against output_split_sizes on every
    rank: a mismatch is an error on all of them, not a hang), then one of the padded rows."""
    what = "all_to_all_single"
    mesh = resolve_group(group, what, mesh_dim, input)
    _convert.check_device(input, mesh, what)
    k = mesh.size()
    if input.dim() == 0 or output.dim() == 0 or tuple(input.shape[1:]) != tuple(output.shape[1:]):
        raise ValueError(f"{what}: input {tuple(input.shape)} and output {tuple(output.shape)} must have a dim 0 "
                         f"and the same other dims")
    send = _splits(input_split_sizes, input.shape[0], k, "input", what)
    recv = _splits(output_split_sizes, output.shape[0], k, "output", what)
    rest = tuple(input.shape[1:])
    if input_split_sizes is None and output_split_sizes is None:
        c = send[0]
        # The global (k, k, c, ...) whose row r is rank r's input: Shard(0) -> Shard(1) hands rank j column j.
        out = _even_all_to_all(input.contiguous().reshape(1, k, c, *rest), mesh, k, c, rest)
        with torch.no_grad():
            output.copy_(out.reshape(output.shape))
        return output
    counts = torch.tensor(send, dtype=torch.int64).reshape(1, k, 1)
    got = _even_all_to_all(counts, mesh, k, 1, ()).reshape(k).tolist()  # got[r]: what rank r sends here
    bad = got != recv
    flags = torch.tensor([max(send), 1 if bad else 0], dtype=torch.int64)
    all_reduce(flags, "max", mesh)
    if bad:
        raise ValueError(f"{what}: output_split_sizes {recv} on this rank, but the ranks send it {got}")
    if flags[1].item():
        raise ValueError(f"{what}: the split sizes disagree on another rank (its output_split_sizes are not what "
                         f"the others send it)")
    c = int(flags[0].item())
    padded = input.new_zeros((k, c, *rest))
    offset = 0
    for j, n in enumerate(send):
        padded[j, :n] = input[offset:offset + n]
        offset += n
    out = _even_all_to_all(padded.reshape(1, k, c, *rest), mesh, k, c, rest).reshape(k, c, *rest)
    with torch.no_grad():
        offset = 0
        for r, n in enumerate(recv):
            output[offset:offset + n] = out[r, :n]
            offset += n
    return output


def _splits(sizes, rows, k, which, what):
    """A side's rows per rank: the given sizes (k of them, summing to its dim 0) or k equal parts."""
    if sizes is None:
        if rows % k:
            raise ValueError(f"{what}: the {which}'s dim 0 ({rows}) is not a multiple of the group size {k}; pass "
                             f"{which}_split_sizes")
        return [rows // k] * k
    sizes = [int(n) for n in sizes]
    if len(sizes) != k or any(n < 0 for n in sizes) or sum(sizes) != rows:
        raise ValueError(f"{what}: {which}_split_sizes {sizes} must be {k} sizes >= 0 summing to the {which}'s "
                         f"dim 0 ({rows})")
    return sizes


def _even_all_to_all(block, mesh, k, c, rest):
    """block (1, k, c, ...): this rank's rows for each rank; returns (k, c, ...) sliced (1, k, c, ...): what each
    rank sent here."""
    return _convert.redistribute(block, mesh, [dtensor.Shard(0)], [dtensor.Shard(1)], shape=(k, k, c, *rest))


def barrier(group=None, *, mesh_dim=None):
    mesh = resolve_group(group, "barrier", mesh_dim)
    if mesh is default_mesh():
        dtensor.get_world().barrier()
        return
    all_reduce(torch.zeros(1, device="cuda" if mesh.device_type == "cuda" else "cpu"), group=mesh)


def all_gather_dim(tensor, dim, mesh):
    """The blocks of every rank concatenated on `dim` (even blocks), as a new tensor (no autograd)."""
    dim = dim % tensor.dim()
    k = mesh.size()
    shape = list(tensor.shape)
    shape[dim] *= k
    return _convert.redistribute(tensor, mesh, [dtensor.Shard(dim)], [dtensor.Replicate()], shape=shape)


def reduce_scatter_dim(tensor, dim, mesh, op="sum"):
    """This rank's block on `dim` of the sum over ranks (even blocks), as a new tensor (no autograd)."""
    dim = dim % tensor.dim()
    return _convert.redistribute(tensor, mesh, [dtensor.Partial(op)], [dtensor.Shard(dim)])


def all_reduce_copy(tensor, mesh, op="sum"):
    """The reduction over ranks, as a new tensor (no autograd)."""
    return _convert.redistribute(tensor, mesh, [dtensor.Partial(op)], [dtensor.Replicate()])
