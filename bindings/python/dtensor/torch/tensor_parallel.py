"""parallelize_module and PyTorch's tensor-parallel styles over a 1-d tp mesh, on plain torch tensors.

Each rank holds its block of the sharded parameters (an nn.Parameter of the local shape, marked with its layout so
that fully_shard and the state dicts know the global tensor); activations are local torch tensors; the layouts
change through differentiable collectives (_tp_functions.py). The styles and their defaults are PyTorch's:

  ColwiseParallel    Linear: weight and bias Shard(0); Embedding: weight Shard(1). Input Replicate (or
                     input_layouts=Shard(d): gathered), output Shard(-1) (or output_layouts=Replicate: gathered).
  RowwiseParallel    Linear: weight Shard(1), bias replicated and added once after the reduction; Embedding: weight
                     Shard(0) (each rank looks up its rows). Input Shard(-1) (or Replicate: split), output Replicate
                     (all-reduce) or Shard(1) (reduce-scatter: sequence parallel).
  SequenceParallel   norm layers (any module with replicated weight/bias working per token): input and output
                     Shard(1) (the sequence dim); the parameters' gradients are summed over the tp ranks.
  PrepareModuleInput / PrepareModuleOutput: layouts of positional (and keyword) inputs or of outputs changed from
                     the given ones to the desired ones.
use_local_output is accepted for compatibility: activations are always local torch tensors here.
"""
import fnmatch
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

import dtensor
from . import _tp_functions as fn
from .mesh import TorchMesh

Shard, Replicate = dtensor.Shard, dtensor.Replicate


def _norm(layout, ndim):
    """A layout with a non-negative shard dim (Shard(-1) of a 3-d tensor is Shard(2))."""
    if isinstance(layout, dtensor.Shard) and layout.dim < 0:
        return Shard(layout.dim + ndim)
    return layout


def _convert(x, src, dst, mesh):
    """x from layout src to dst, gradients replicated (PrepareModuleInput/Output)."""
    if not isinstance(x, torch.Tensor) or src is None or dst is None:
        return x
    src, dst = _norm(src, x.dim()), _norm(dst, x.dim())
    if src == dst:
        return x
    if isinstance(src, dtensor.Shard) and isinstance(dst, dtensor.Replicate):
        return fn.Gather.apply(x, src.dim, mesh)
    if isinstance(src, dtensor.Replicate) and isinstance(dst, dtensor.Shard):
        return fn.Split.apply(x, dst.dim, mesh)
    if isinstance(src, dtensor.Shard) and isinstance(dst, dtensor.Shard):
        return fn.Split.apply(fn.Gather.apply(x, src.dim, mesh), dst.dim, mesh)
    raise NotImplementedError(f"layout change {src} -> {dst} is not supported")


def _one(layouts, default):
    """A style's layout argument: one placement, or a 1-tuple of one (PyTorch accepts both)."""
    if layouts is None:
        return default
    if isinstance(layouts, (tuple, list)):
        if len(layouts) != 1:
            raise ValueError(f"expected one layout, got {len(layouts)}: {layouts}")
        return layouts[0]
    return layouts


def _shard_param(module, attr, dim, mesh, what):
    p = getattr(module, attr)
    k, r = mesh.size(), mesh.get_local_rank()
    if p.shape[dim] % k:
        raise ValueError(f"{what}: {attr} of shape {tuple(p.shape)} does not split evenly on dim {dim} over the {k} tp "
                         f"ranks")
    local = nn.Parameter(p.detach().chunk(k, dim)[r].clone(), requires_grad=p.requires_grad)
    local._dt_tp = (mesh, [Shard(dim)], tuple(p.shape))
    setattr(module, attr, local)


def _replicate_param_grads(params, mesh):
    """Replicated parameters used on a block of the tokens (sequence parallel): their gradients are summed over the
    tp ranks (fully_shard carries the mark over to the parameters it gathers)."""
    from .collectives import all_reduce_copy
    for p in params:
        if p is not None and p.requires_grad:
            p._dt_grad_all_reduce = mesh
            p.register_hook(lambda g: all_reduce_copy(g, mesh))


class ParallelStyle:
    def _apply(self, module, mesh, name):
        raise NotImplementedError


class ColwiseParallel(ParallelStyle):
    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layout = _one(input_layouts, Replicate())
        self.output_layout = _one(output_layouts, Shard(-1))

    def _apply(self, module, mesh, name):
        what = f"ColwiseParallel({name or type(module).__name__})"
        if isinstance(module, nn.Linear):
            _shard_param(module, "weight", 0, mesh, what)
            if module.bias is not None:
                _shard_param(module, "bias", 0, mesh, what)
        elif isinstance(module, nn.Embedding):
            _shard_param(module, "weight", 1, mesh, what)
        else:
            raise TypeError(f"{what}: supports nn.Linear and nn.Embedding, got {type(module).__name__}")
        src = self.input_layout

        def pre(mod, args):
            x = args[0]
            if not torch.is_floating_point(x):  # token ids: nothing flows back
                return (_convert(x, src, Replicate(), mesh), *args[1:])
            s = _norm(src, x.dim())
            x = fn.GatherPartialGrad.apply(x, s.dim, mesh) if isinstance(s, dtensor.Shard) else \
                fn.CopyToParallel.apply(x, mesh)
            return (x, *args[1:])

        out_layout = self.output_layout
        module.register_forward_pre_hook(pre)
        module.register_forward_hook(lambda mod, args, out: _convert(out, Shard(-1), out_layout, mesh))


class RowwiseParallel(ParallelStyle):
    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layout = _one(input_layouts, Shard(-1))
        self.output_layout = _one(output_layouts, Replicate())

    def _apply(self, module, mesh, name):
        what = f"RowwiseParallel({name or type(module).__name__})"
        out = self.output_layout
        if isinstance(out, dtensor.Shard):
            reduce = lambda y: fn.ReduceScatter.apply(y, _norm(out, y.dim()).dim, mesh)  # noqa: E731
        elif isinstance(out, dtensor.Replicate):
            reduce = lambda y: fn.AllReduce.apply(y, mesh)  # noqa: E731
        else:
            raise ValueError(f"{what}: output_layouts must be Replicate() or Shard(d), got {out}")
        if isinstance(module, nn.Linear):
            _shard_param(module, "weight", 1, mesh, what)

            def forward(self, x):
                y = reduce(F.linear(x, self.weight))
                return y + self.bias if self.bias is not None else y

            if isinstance(out, dtensor.Shard):  # the bias is added to a block of the tokens
                _replicate_param_grads([module.bias], mesh)

            src = self.input_layout
            module.register_forward_pre_hook(lambda mod, args: (_convert(args[0], src, Shard(-1), mesh), *args[1:]))
        elif isinstance(module, nn.Embedding):
            _shard_param(module, "weight", 0, mesh, what)
            rows = module.weight.shape[0]
            start = mesh.get_local_rank() * rows

            def forward(self, ids):
                local = ids - start
                outside = (local < 0) | (local >= rows)
                y = F.embedding(local.masked_fill(outside, 0), self.weight)
                return reduce(y.masked_fill(outside.unsqueeze(-1), 0.0))
        else:
            raise TypeError(f"{what}: supports nn.Linear and nn.Embedding, got {type(module).__name__}")
        module.forward = types.MethodType(forward, module)


class SequenceParallel(ParallelStyle):
    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_dim = sequence_dim

    def _apply(self, module, mesh, name):
        if not any(True for _ in module.parameters(recurse=False)) and not isinstance(module, nn.Dropout):
            raise TypeError(f"SequenceParallel({name or type(module).__name__}): expects a norm layer (or another "
                            f"module with replicated parameters working per token)")
        _replicate_param_grads(list(module.parameters(recurse=False)), mesh)


class PrepareModuleInput(ParallelStyle):
    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        one = lambda v: (v,) if v is None or isinstance(v, dtensor.Placement) else tuple(v)  # noqa: E731
        self.input_layouts, self.desired = one(input_layouts), one(desired_input_layouts)
        self.kw, self.desired_kw = dict(input_kwarg_layouts or {}), dict(desired_input_kwarg_layouts or {})
        if len(self.input_layouts) != len(self.desired):
            raise ValueError("PrepareModuleInput: input_layouts and desired_input_layouts differ in length")

    def _apply(self, module, mesh, name):
        def pre(mod, args, kwargs):
            args = tuple(_convert(a, s, d, mesh) if i < len(self.desired) else a
                         for i, (a, s, d) in enumerate(zip(args, self.input_layouts + (None,) * len(args),
                                                              self.desired + (None,) * len(args))))
            kwargs = {k: _convert(v, self.kw.get(k), self.desired_kw.get(k), mesh) for k, v in kwargs.items()}
            return args, kwargs
        module.register_forward_pre_hook(pre, with_kwargs=True)


class PrepareModuleOutput(ParallelStyle):
    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        one = lambda v: (v,) if isinstance(v, dtensor.Placement) else tuple(v)  # noqa: E731
        self.output_layouts, self.desired = one(output_layouts), one(desired_output_layouts)

    def _apply(self, module, mesh, name):
        def post(mod, args, out):
            if isinstance(out, torch.Tensor):
                return _convert(out, self.output_layouts[0], self.desired[0], mesh)
            return type(out)(_convert(o, s, d, mesh) for o, s, d in zip(out, self.output_layouts, self.desired))
        module.register_forward_hook(post)


def _matches(pattern, name):
    a, b = pattern.split("."), name.split(".")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(y, x) for x, y in zip(a, b))


def parallelize_module(module, device_mesh=None, parallelize_plan=None):
    """Applies a style to `module` itself, or a plan {fully-qualified name pattern ("layers.*.attn.q"): style} to
    its submodules, over the 1-d tp mesh `device_mesh`. Returns the module."""
    if not isinstance(device_mesh, TorchMesh):
        raise TypeError(f"parallelize_module({type(module).__name__}): device_mesh must be a dtensor.torch mesh "
                        f"(init_device_mesh(...)['tp']), got {type(device_mesh).__name__}")
    if device_mesh.ndim != 1:
        raise ValueError(f"parallelize_module({type(module).__name__}): the mesh must be 1-d (the tp dim, e.g. "
                         f"mesh['tp']), got dims {device_mesh.mesh_dim_names}")
    from .state_dict import install_hooks
    install_hooks(module)
    if parallelize_plan is None:
        return module
    if isinstance(parallelize_plan, ParallelStyle):
        parallelize_plan._apply(module, device_mesh, "")
        return module
    if not isinstance(parallelize_plan, dict):
        raise TypeError(f"parallelize_module({type(module).__name__}): the plan is a style or a dict of patterns to "
                        f"styles, got {type(parallelize_plan).__name__}")
    named = list(module.named_modules())
    for pattern, style in parallelize_plan.items():
        hits = [(n, m) for n, m in named if n and _matches(pattern, n)]
        if not hits:
            raise ValueError(f"parallelize_module({type(module).__name__}): no submodule matches {pattern!r}")
        for n, m in hits:
            style._apply(m, device_mesh, n)
    return module
