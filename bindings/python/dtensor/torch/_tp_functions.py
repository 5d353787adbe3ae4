"""Differentiable collectives over one mesh dim, for tensor parallelism on plain torch tensors (each rank holds its
block). Two gradient conventions: a tensor in the Replicate layout has the same gradient on every rank, except the
input of a colwise-sharded op, whose gradient is a partial sum over the ranks (Megatron's f and g functions)."""
import torch

from . import collectives


def _block(t, dim, mesh):
    k, r = mesh.size(), mesh.get_local_rank()
    return t.chunk(k, dim)[r].contiguous() if k > 1 else t


class CopyToParallel(torch.autograd.Function):
    """Replicate in, used by a colwise op: forward identity, backward all-reduce (the partial input gradients)."""

    @staticmethod
    def forward(ctx, x, mesh):
        ctx.mesh = mesh
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return collectives.all_reduce_copy(g, ctx.mesh), None


class AllReduce(torch.autograd.Function):
    """Partial sums out of a rowwise op into Replicate: forward all-reduce, backward identity."""

    @staticmethod
    def forward(ctx, x, mesh):
        return collectives.all_reduce_copy(x, mesh)

    @staticmethod
    def backward(ctx, g):
        return g, None


class GatherPartialGrad(torch.autograd.Function):
    """Shard(dim) in, used by a colwise op: forward all-gather, backward reduce-scatter (partial gradients)."""

    @staticmethod
    def forward(ctx, x, dim, mesh):
        ctx.dim, ctx.mesh = dim, mesh
        return collectives.all_gather_dim(x, dim, mesh)

    @staticmethod
    def backward(ctx, g):
        return collectives.reduce_scatter_dim(g, ctx.dim, ctx.mesh), None, None


class ReduceScatter(torch.autograd.Function):
    """Partial sums out of a rowwise op into Shard(dim): forward reduce-scatter, backward all-gather."""

    @staticmethod
    def forward(ctx, x, dim, mesh):
        ctx.dim, ctx.mesh = dim, mesh
        return collectives.reduce_scatter_dim(x, dim, mesh)

    @staticmethod
    def backward(ctx, g):
        return collectives.all_gather_dim(g, ctx.dim, ctx.mesh), None, None


class Gather(torch.autograd.Function):
    """Shard(dim) -> Replicate: forward all-gather, backward this rank's block of the (replicated) gradient."""

    @staticmethod
    def forward(ctx, x, dim, mesh):
        ctx.dim, ctx.mesh = dim, mesh
        return collectives.all_gather_dim(x, dim, mesh)

    @staticmethod
    def backward(ctx, g):
        return _block(g, ctx.dim, ctx.mesh), None, None


class Split(torch.autograd.Function):
    """Replicate -> Shard(dim): forward this rank's block, backward all-gather."""

    @staticmethod
    def forward(ctx, x, dim, mesh):
        ctx.dim, ctx.mesh = dim, mesh
        return _block(x, dim, mesh)

    @staticmethod
    def backward(ctx, g):
        return collectives.all_gather_dim(g, ctx.dim, ctx.mesh), None, None
