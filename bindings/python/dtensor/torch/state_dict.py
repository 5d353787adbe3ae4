"""State dicts of sharded modules: sharded entries for dtensor's checkpoints, full ones on request, HF export.

After fully_shard or parallelize_module, model.state_dict() holds dtensor DTensors: a sharded parameter is the
engine's shard (its global shape and placements; the block is the optimizer's memory, no copy), a tensor-parallel
one its tp block, anything else (plain parameters, buffers) replicated over the world. dtensor.checkpoint.save
writes them and dtensor.checkpoint.load reads a checkpoint of any world size and layout into them in place, so

    dtensor.checkpoint.save(path, model.state_dict())          # collective
    dtensor.checkpoint.load(path, model.state_dict())          # in place: the model has the values

model.load_state_dict() takes such entries too (from another layout: they are gathered first), and full tensors
(the global shape: each rank takes its block). full_state_dict() gathers everything into torch tensors.
"""
import json
import os

import torch

import dtensor
from . import _convert
from ._param_group import materialize_pending
from .mesh import default_mesh

_SHARDED_FACES = {}  # id(sharded face) -> (TorchParamGroup, index), for every fully_shard group alive


def register_group(group):
    for i, m in enumerate(group.params):
        _SHARDED_FACES[id(m.sharded)] = (group, i)


def _as_dtensor(t):
    """The DTensor of a module's parameter or buffer (a view of its memory)."""
    hit = _SHARDED_FACES.get(id(t))
    if hit is not None:
        group, i = hit
        return group.group.sharded_param(i)
    tp = getattr(t, "_dt_tp", None)
    if tp is not None:
        mesh, placements, shape = tp
        return _convert.to_dt(t.detach(), mesh, placements, shape)
    mesh = default_mesh(t.device.type)
    return _convert.to_dt(t.detach(), mesh, [dtensor.Replicate()])


def _save_hook(module, state_dict, prefix, local_metadata):
    materialize_pending()  # groups over meta parameters get their engine group first
    for attr, t in list(module._parameters.items()) + list(module._buffers.items()):
        key = prefix + attr
        if t is not None and key in state_dict and isinstance(state_dict[key], torch.Tensor):
            state_dict[key] = _as_dtensor(t)


def _local_block(full, target):
    """This rank's block of the full tensor `full` for the module tensor `target`."""
    d = _as_dtensor(target)
    try:
        off, shape = d.local_offset, d.local_shape
    finally:
        d.close()
    return full[tuple(slice(o, o + s) for o, s in zip(off, shape))]


def _load_hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    materialize_pending()
    for attr, t in list(module._parameters.items()) + list(module._buffers.items()):
        key = prefix + attr
        if t is None or key not in state_dict:
            continue
        v = state_dict[key]
        if isinstance(v, dtensor.DTensor):
            v = _full_torch(v)
        if isinstance(v, torch.Tensor) and tuple(v.shape) != tuple(t.shape):
            v = _local_block(v, t)
        state_dict[key] = v


def install_hooks(module):
    for m in module.modules():
        if not getattr(m, "_dt_state_dict_hooks", False):
            m._dt_state_dict_hooks = True
            m._register_state_dict_hook(_save_hook)
            m._register_load_state_dict_pre_hook(_load_hook, with_module=True)


def _full_torch(d):
    """A DTensor gathered into a new torch tensor (collective)."""
    arr = d.full_tensor()
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if d.dtype_name == "bfloat16" else t


def sharded_state_dict(model):
    """{name: DTensor} of every parameter and persistent buffer: model.state_dict() after fully_shard or
    parallelize_module (their hooks are installed here for any other module)."""
    install_hooks(model)
    return model.state_dict()


def full_state_dict(model, cpu_offload=True):
    """{name: torch tensor of the global shape} on every rank (collective)."""
    out = {}
    for k, v in sharded_state_dict(model).items():
        out[k] = _full_torch(v) if isinstance(v, dtensor.DTensor) else v
        if isinstance(v, dtensor.DTensor):
            v.close()
    return out


def load_full_state_dict(model, state_dict, strict=True):
    """Loads full tensors (or DTensors of any layout) into a sharded model: each rank takes its blocks."""
    install_hooks(model)
    return model.load_state_dict(state_dict, strict=strict)


def optimizer_state_dict(model, optimizer):
    """The optimizer's state as {"optim.<parameter name>.<state key>": tensor} (PyTorch's flattened optimizer state
    dict): a state tensor of its parameter's shape is a DTensor with the parameter's layout over the state's memory
    (zero copy), so that save() writes it from one layout and load() reads it into another, in place; other state
    (Adam's step) stays a plain tensor, equal on every rank. An optimizer without state yet (a fresh one, to load
    into) gets it first from one step at learning rate 0 on zero gradients (no parameter changes, weight decay
    included); collective only through the model's state dict."""
    materialize_pending()
    names = {id(p): n for n, p in model.named_parameters()}
    _init_state(optimizer)
    out = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = names.get(id(p))
            if name is None:
                raise ValueError(f"optimizer_state_dict: the optimizer holds a parameter of shape {tuple(p.shape)} "
                                 f"that is not one of {type(model).__name__}'s (build it from model.parameters() "
                                 f"after fully_shard / parallelize_module)")
            layout = None
            for key, v in optimizer.state.get(p, {}).items():
                if not isinstance(v, torch.Tensor):
                    continue
                if v.dim() and tuple(v.shape) == tuple(p.shape):
                    if layout is None:
                        d = _as_dtensor(p)
                        try:
                            layout = (d.device_mesh, d.placements, d.shape)
                        finally:
                            d.close()
                    v = dtensor.from_dlpack(v.detach(), layout[0], layout[1], shape=layout[2])
                out[f"optim.{name}.{key}"] = v
    return out


def _init_state(optimizer):
    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    if any(p.grad is not None for p in params):
        raise ValueError(f"optimizer_state_dict: {type(optimizer).__name__} has no state yet and its parameters hold "
                         f"gradients, which making the state would drop; call it before backward or after a step")
    for p in params:
        p.grad = torch.zeros_like(p)
    rates = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
    try:
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, rates):
            g["lr"] = lr
        for p in params:
            p.grad = None


def save(path, state_dict, metadata=None):
    """dtensor.checkpoint.save for a state dict that may also hold plain torch tensors (replicated)."""
    tensors = {k: v if isinstance(v, dtensor.DTensor) else _as_dtensor(v) for k, v in state_dict.items()}
    dtensor.checkpoint.save(path, tensors, metadata=metadata)


def load(path, state_dict, strict=True):
    """dtensor.checkpoint.load into a state dict's entries in place (model.state_dict(): the model's memory)."""
    tensors = {k: v if isinstance(v, dtensor.DTensor) else _as_dtensor(v) for k, v in state_dict.items()}
    return dtensor.checkpoint.load(path, tensors, strict=strict)


def export_hf(model, folder, config=None):
    """Writes the full parameters as a Hugging Face folder (model.safetensors, and config.json from `config` or
    model.config) on rank 0; collective (every rank gathers)."""
    full = full_state_dict(model)
    if dtensor.get_world().rank == 0:
        from safetensors.torch import save_file
        os.makedirs(folder, exist_ok=True)
        tensors = {k: v.contiguous() for k, v in full.items()}
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        config = config if config is not None else getattr(model, "config", None)
        if config is not None and hasattr(config, "save_pretrained"):
            config.save_pretrained(folder)
        elif isinstance(config, dict):
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(config, f, indent=2)
    dtensor.get_world().barrier()
