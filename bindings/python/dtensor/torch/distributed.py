"""torch.distributed's process-group calls over dtensor's world, so that `from dtensor.torch import distributed as
dist` replaces `import torch.distributed as dist` in a training script. group=: a 1-d dtensor.torch mesh
(mesh.get_group("dp"), mesh["dp"]); None: the whole world."""
import enum

import dtensor
from . import collectives
from .mesh import default_mesh


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


def init_process_group(backend=None, **kwargs):
    """Joins the job the launcher started (dtrun, torchrun, mpirun, srun). backend: None, "gloo" or "ucx" (host
    memory, UCX), "nccl" (CUDA). Other torch.distributed arguments (init_method, timeout, ...) come from the
    environment here (DT_TIMEOUT_S for the timeout)."""
    if backend not in (None, "gloo", "ucx", "nccl", "cpu:gloo,cuda:nccl"):
        raise ValueError(f"init_process_group: backend must be None, 'gloo', 'ucx' or 'nccl', got {backend!r}")
    dtensor.init_process_group("nccl" if backend == "nccl" else None)


def is_initialized():
    w = dtensor.world._default
    return w is not None and w.handle is not None


def is_available():
    return True


def get_rank(group=None):
    if group is None:
        return dtensor.get_world().rank
    return collectives.resolve_group(group, "get_rank").get_local_rank()


def get_world_size(group=None):
    if group is None:
        return dtensor.get_world().size
    return collectives.resolve_group(group, "get_world_size").size()


def destroy_process_group(group=None):
    """Ends the world (group None); the meshes made from it must not be used afterwards."""
    if group is None and is_initialized():
        dtensor.get_world().barrier()


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    collectives.all_reduce(tensor, op, group)
    return _Done() if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    collectives.all_gather_into_tensor(output_tensor, input_tensor, group)
    return _Done() if async_op else None


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    collectives.reduce_scatter_tensor(output, input, op, group)
    return _Done() if async_op else None


def broadcast(tensor, src=0, group=None, async_op=False):
    """src: a global rank (as torch.distributed's); it must belong to the group."""
    mesh = collectives.resolve_group(group, "broadcast")
    coord = mesh.get_local_rank()
    # The group's ranks in order: the global ranks of each group coordinate, through one all-gather of the ranks.
    import torch
    ranks = torch.zeros(mesh.size(), dtype=torch.int64)
    ranks[coord] = dtensor.get_world().rank
    collectives.all_reduce(ranks, "sum", mesh)
    if src not in ranks.tolist():
        raise ValueError(f"broadcast: src rank {src} is not in the group (ranks {ranks.tolist()})")
    collectives.broadcast(tensor, ranks.tolist().index(src), mesh)
    return _Done() if async_op else None


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    collectives.all_to_all_single(output, input, group, output_split_sizes=output_split_sizes,
                                  input_split_sizes=input_split_sizes)
    return _Done() if async_op else None


def barrier(group=None, async_op=False, device_ids=None):
    collectives.barrier(group)
    return _Done() if async_op else None


class _Done:
    """The handle of a call that completed before returning (async_op=True)."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


def new_group(ranks=None, **kwargs):
    if ranks is not None and sorted(ranks) != list(range(dtensor.get_world().size)):
        raise NotImplementedError("new_group: only the whole world; take sub-groups from a mesh "
                                  "(init_device_mesh(...).get_group('dp'))")
    return default_mesh()
