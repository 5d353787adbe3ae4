"""dtensor.torch: PyTorch's FSDP2, tensor-parallel and collective APIs over dtensor's C API.

A PyTorch FSDP2 script changes its imports, not its code:

    from dtensor.torch import fully_shard, MixedPrecisionPolicy, init_device_mesh   # was torch.distributed.fsdp /
    from dtensor.torch import distributed as dist                                   # .device_mesh / torch.distributed

It runs under dtrun and under torchrun (the process group is dtensor's: UCX between host tensors, NCCL for CUDA).
See docs/torch.md.
"""
from dtensor import Partial, Replicate, Shard  # the placements of the tensor-parallel styles' layouts
from .mesh import TorchMesh as DeviceMesh, init_device_mesh
from .mixed_precision import MixedPrecisionPolicy, OffloadPolicy, CPUOffloadPolicy
from .fsdp import fully_shard, FSDPModule
from .collectives import (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single,
                          barrier)
from .tensor_parallel import (parallelize_module, ColwiseParallel, RowwiseParallel, SequenceParallel,
                              PrepareModuleInput, PrepareModuleOutput)
from .state_dict import (sharded_state_dict, full_state_dict, load_full_state_dict, optimizer_state_dict, save, load,
                         export_hf)
from .clip_grad import clip_grad_norm_
from . import distributed


__all__ = [
    "DeviceMesh", "init_device_mesh", "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy", "fully_shard",
    "FSDPModule", "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single",
    "barrier", "parallelize_module", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
    "PrepareModuleOutput", "sharded_state_dict", "full_state_dict", "load_full_state_dict", "optimizer_state_dict",
    "save", "load",
    "export_hf", "clip_grad_norm_", "distributed", "Shard", "Replicate", "Partial",
]
