"""fully_shard's policies, with PyTorch FSDP2's names and defaults."""
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """param_dtype: the dtype parameters are gathered in (and forward/backward compute in); reduce_dtype: the dtype
    gradients are reduce-scattered in (None: param_dtype); output_dtype: the forward outputs' dtype (None: as
    computed); cast_forward_inputs: cast floating-point forward inputs to param_dtype. The shards, the optimizer and
    the gradients it sees keep the parameters' own dtype."""
    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    output_dtype: Optional[torch.dtype] = None
    cast_forward_inputs: bool = True


@dataclass
class OffloadPolicy:
    """No offloading (the default)."""


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """Shards and gradients live in host memory (CUDA meshes); on a CPU mesh they are there already."""
    pin_memory: bool = True


def dtype_name(dtype):
    """A torch dtype as dtensor's dtype name ("float32", "bfloat16", ...)."""
    return str(dtype).replace("torch.", "")
