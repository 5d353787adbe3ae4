"""dtensor for Python: distributed tensors (device meshes, Shard/Replicate/Partial placements, redistribution, ops,
sharded checkpoints, the FSDP engine) over dtensor's C API, with NumPy arrays and DLPack (PyTorch) in and out.

    import numpy as np, dtensor
    mesh = dtensor.DeviceMesh(None, "cpu", (2, 2), ("dp", "tp"))     # joins the job dtrun/torchrun/mpirun started
    x = dtensor.distribute_tensor(np.arange(24.0).reshape(4, 6), mesh, [dtensor.Shard(0), dtensor.Replicate()])
    y = x.redistribute([dtensor.Replicate(), dtensor.Shard(1)])
    y.to_local()        # a NumPy view of this rank's block (no copy)
    y.full_tensor()     # the whole tensor (NumPy)

Python over ctypes, with optional compiled fast paths (_speedups.c: DTensor's base type); the library is
libdtensor.so (see _lib.py for how it is found).
"""
from .errors import (CudaError, DTensorTimeoutError, Error, InternalError, InvalidArgumentError, InvalidHandleError,
                     RemoteError, SystemError_, TimeoutError_, UnsupportedError)
from .placements import Partial, Placement, Replicate, Shard, parse_placements, format_placements
from .world import World, init, init_process_group, get_world, version, from_nccl, set_stream, current_stream
from .mesh import DeviceMesh
from .tensor import DTensor, Work, distribute_tensor, from_dlpack, op, ops_list, layout_block, plan_describe
from . import ops
from .checkpoint import save_checkpoint, load_checkpoint
from .fsdp import FsdpParamGroup
from .debug import CommDebugMode

__version__ = version()

__all__ = [
    "Error", "InvalidArgumentError", "UnsupportedError", "DTensorTimeoutError", "TimeoutError_", "RemoteError",
    "SystemError_", "CudaError", "InternalError", "InvalidHandleError", "Placement", "Shard", "Replicate", "Partial",
    "parse_placements", "format_placements", "World", "init", "init_process_group", "get_world", "version",
    "from_nccl", "set_stream", "current_stream",
    "DeviceMesh", "DTensor", "Work", "distribute_tensor", "from_dlpack", "op", "ops", "ops_list", "layout_block",
    "plan_describe", "save_checkpoint", "load_checkpoint", "FsdpParamGroup", "CommDebugMode",
]
