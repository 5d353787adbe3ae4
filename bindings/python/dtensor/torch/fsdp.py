"""fully_shard: PyTorch FSDP2's API over dtensor's FSDP engine (a binding: hooks in, engine calls out).

    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters())     # the local shards

Each call makes one engine parameter group of the module's parameters that no earlier call took (bottom-up: blocks
first, then the root takes the rest), sharded on dim 0 over the mesh (1-d: FSDP; 2-d: HSDP), and turns the module
into an FSDPModule (a subclass made on the fly, as FSDP2's, whose __call__ wraps the class's own: Note [Hook costs]
in _hook_bodies.py). The step, mapped onto the call and PyTorch's hooks:

  before forward       unshard + wait (a gather that moved re-points the faces' storage: Note [Gathered memory that
                       moves]); then the next group's gather is started (implicit prefetch, in the order recorded by
                       the first forward; or the modules given to set_modules_to_forward_prefetch); floating inputs
                       cast to mp_policy.param_dtype
  after forward        reshard (keeping the reshard_after_forward share; the root keeps its parameters); a hook on
                       each output tensor that requires grad runs the pre-backward
  pre-backward         unshard + wait, and the previous group's gather started (or set_modules_to_backward_prefetch)
  post-accumulate-grad each unsharded gradient to the engine; the group's last one starts its reduce-scatter and
                       reshards (Note [Resharding after backward])
  end of backward      (a callback the root queues) every reduction waited for, the gradient shards set as the
                       sharded parameters' .grad (summed into an existing one), every group resharded
"""
import weakref

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._pytree import tree_flatten, tree_map

from ._hook_bodies import StateBase, finish_all, module_call
from ._param_group import TorchParamGroup
from .mesh import as_mesh, default_mesh
from .state_dict import install_hooks, register_group
from .mixed_precision import MixedPrecisionPolicy, OffloadPolicy, CPUOffloadPolicy

# Note [Resharding after backward]
# A group's last gradient means that every backward node reading its gathered parameters has run (a node that
# reads a parameter is the one that computes its gradient, and autograd sums a parameter's uses before its
# accumulate-grad node runs), so the group reshards there, freeing its memory while backward goes on. A group with
# frozen parameters waits for the end of backward instead: nothing tells when the nodes reading those are done.


def _in_backward():
    return torch._C._current_graph_task_id() != -1


class _Context:
    """What the FSDP modules under one root share: the order of their first forward, the end-of-backward
    callback."""

    def __init__(self, root):
        self.root = root
        self.states = []  # every FSDP state under the root, root first
        self.order = []  # forward order of the first iteration (states with a group)
        self.order_done = False
        self.callback_queued = False


class _State(StateBase):
    """An FSDP module's state; the base (StateHooks or its compiled twin) holds the fields the per-call work reads
    and the pre-backward hook (Note [Hook costs])."""

    def __init__(self, module, mesh, reshard_after_forward, mp_policy, offload_policy):
        self.module = module
        self.mesh = mesh
        self.label = type(module).__name__
        self.reshard_after_forward = reshard_after_forward
        self.mp = mp_policy
        self.offload = offload_policy
        self.group = None
        self.ctx = None
        self.is_root = False
        self.forward_prefetch = None
        self.backward_prefetch = None
        self.pre_backward_done = False
        self.is_last_backward = True
        self.order_index = 0  # the place in the first forward's order (the root's post-forward sets it)
        self.inner_call = type(module).__call__  # the module class's own call (hooks, forward)
        self.fast = False
        self.reshard_post = False
        self.forward_targets = ()
        self.backward_targets = ()

    def refresh(self):
        """What the call decides once (Note [Hook costs]): whether it may take the fast path (not the root, a group,
        the forward order known, no casts of inputs or outputs), whether it reshards after forward, what it
        prefetches."""
        ctx, mp = self.ctx, self.mp
        self.reshard_post = self.group is not None and not self.is_root and self.reshard_after_forward is not False \
            and not (type(self.reshard_after_forward) is int and self.reshard_after_forward == 1)
        self.forward_targets = tuple(s.group for s in self._forward_targets())
        self.backward_targets = tuple(s.group for s in self._backward_targets()) if ctx is not None else ()
        self.fast = ctx is not None and ctx.order_done and not self.is_root and self.group is not None and \
            not (mp.param_dtype is not None and mp.cast_forward_inputs) and mp.output_dtype is None

    # ---- the call (every case; the compiled module call takes the fast cases itself)
    def call(self, module, args, kwargs):
        args, kwargs = self.pre_forward(module, args, kwargs)
        try:
            output = self.inner_call(module, *args, **kwargs)
        except BaseException:
            self._forward_failed()
            raise
        return self.post_forward(module, output)

    def pre_forward(self, module, args, kwargs):
        ctx = self.ctx
        if ctx is None:
            ctx = _lazy_init(self)
        if _in_backward():  # activation checkpointing's recomputation: gathered by the pre-backward
            if self.group is not None:
                self.group.wait()
            return args, kwargs
        if self.is_root:
            ctx.callback_queued = False
        if self.group is not None:
            if not ctx.order_done:
                ctx.order.append(self)
            self.group.unshard()
            self.group.wait()
            for target in self.forward_targets:
                target.unshard()
        if self.mp.param_dtype is not None and self.mp.cast_forward_inputs:
            dtype = self.mp.param_dtype
            cast = lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and torch.is_floating_point(t) else t  # noqa
            args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
        return args, kwargs

    def post_forward(self, module, output):
        ctx = self.ctx
        if _in_backward():
            return output
        if self.is_root:
            if not ctx.order_done:
                ctx.order_done = True
                for i in reversed(range(len(ctx.order))):  # a module run twice keeps its first place
                    ctx.order[i].order_index = i
                for s in ctx.states:
                    s.refresh()
        elif self.reshard_post:
            self.group.reshard(True)
        if self.mp.output_dtype is not None:
            dtype = self.mp.output_dtype
            output = tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and torch.is_floating_point(t)
                              else t, output)
        if torch.is_grad_enabled():
            self._hook_outputs(output)
        return output

    def _hook_outputs(self, output):
        for t in tree_flatten(output)[0]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                node = t.grad_fn  # Note [The pre-backward hook's node]
                if node is not None:
                    node.register_prehook(self._pre_backward_hook)
                else:
                    t.register_hook(self._pre_backward_hook)

    def _forward_failed(self):
        """The forward raised: the group resharded as after a forward (not in a recomputation inside backward, which
        the backward's own gather serves)."""
        if _in_backward():
            return
        if self.reshard_post:
            self.group.reshard(True)

    def _queue_final(self):
        ctx = self.ctx
        ctx.callback_queued = True
        torch.autograd.Variable._execution_engine.queue_callback(ctx.root._dt_state.post_backward_final)

    def post_backward_final(self):
        ctx = self.ctx
        finish_all(ctx.order, ctx.states, self.is_last_backward)  # Note [Not the last backward]
        ctx.callback_queued = False

    # ---- prefetch targets
    def _forward_targets(self):
        if self.forward_prefetch is not None:
            return self.forward_prefetch
        if self.ctx is None or not self.ctx.order_done:
            return ()
        order, i = self.ctx.order, self.order_index
        return (order[i + 1],) if i + 1 < len(order) else ()

    def _backward_targets(self):
        if self.backward_prefetch is not None:
            return self.backward_prefetch
        order, i = self.ctx.order, self.order_index
        return (order[i - 1],) if i > 0 else ()


def _lazy_init(state):
    """The first forward of an FSDP module with no context makes it the root of every FSDP module below it."""
    root = state.module
    ctx = _Context(root)
    state.is_root = True
    for name, m in root.named_modules():
        s = getattr(m, "_dt_state", None)
        if isinstance(s, _State):
            if s.ctx is not None and s is not state:
                raise RuntimeError(f"fully_shard: {s.label} ({name}) already belongs to the root "
                                   f"{type(s.ctx.root).__name__}; run the forward of the outermost FSDP module")
            s.ctx = ctx
            if name:
                s.label = f"{name} ({type(m).__name__})"
            ctx.states.append(s)
    # The root's parameters are used again at once by backward: it keeps them after forward (as FSDP2's).
    state.reshard_after_forward = False
    for s in ctx.states:
        s.refresh()
    return ctx


class FSDPModule:
    """What fully_shard adds to a module (PyTorch FSDP2's FSDPModule methods)."""

    def unshard(self, async_op=False):
        """Gathers this module's parameters now; async_op: returns a handle whose wait() finishes the gather."""
        group = self._dt_state.group
        if group is None:
            return None
        group.unshard(True)
        if async_op:
            return _UnshardHandle(group)
        group.wait()
        return None

    def reshard(self):
        if self._dt_state.group is not None:
            self._dt_state.group.reshard()

    def _fsdp_states(self, recurse):
        if not recurse:
            return [self._dt_state]
        return [m._dt_state for m in self.modules() if isinstance(getattr(m, "_dt_state", None), _State)]

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """False: backward keeps the gradients unsharded and summed (gradient accumulation without communication);
        the next backward with True reduces the sum."""
        for s in self._fsdp_states(recurse):
            if s.group is not None:
                s.group.set_requires_gradient_sync(requires_gradient_sync)

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        for s in self._fsdp_states(recurse):
            if s.group is not None:
                s.group.reshard_after_backward = bool(reshard_after_backward)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        for s in self._fsdp_states(recurse):
            if not s.is_root:
                s.reshard_after_forward = reshard_after_forward
                s.refresh()

    def set_gradient_divide_factor(self, factor):
        """This module's gradients are divided by `factor` in the next reductions (default: the data-parallel size;
        1.0 sums them, as torchtitan does when it divides the loss itself). This module only, as FSDP2's."""
        if self._dt_state.group is not None:
            self._dt_state.group.set_gradient_divide_factor(factor)

    def set_force_sum_reduction_for_comms(self, enable):
        """True: this module's reductions sum, and the sum is divided by the factor after (FSDP2's; the default
        averages in the collective). This module only, as FSDP2's."""
        if self._dt_state.group is not None:
            self._dt_state.group.set_force_sum_reduction_for_comms(enable)

    def set_reduce_scatter_divide_factor(self, factor):
        """FSDP2's older name of set_gradient_divide_factor."""
        self.set_gradient_divide_factor(factor)

    def set_is_last_backward(self, is_last_backward):
        """False: the next backwards (microbatches) end without waiting for their last reduction, which finishes
        during the next microbatch (Note [Not the last backward]); set True before the last one. Once the forward
        made the root, it applies to the root's whole tree, whichever module it is called on (FSDP2's is shared)."""
        ctx = self._dt_state.ctx
        for s in ctx.states if ctx is not None else self._fsdp_states(True):
            s.is_last_backward = bool(is_last_backward)

    def set_modules_to_forward_prefetch(self, modules):
        self._dt_state.forward_prefetch = _prefetch_states(self, modules, "set_modules_to_forward_prefetch")
        self._dt_state.refresh()

    def set_modules_to_backward_prefetch(self, modules):
        self._dt_state.backward_prefetch = _prefetch_states(self, modules, "set_modules_to_backward_prefetch")
        self._dt_state.refresh()


def _prefetch_states(owner, modules, what):
    states = []
    for m in modules:
        s = getattr(m, "_dt_state", None)
        if not isinstance(s, _State):
            raise ValueError(f"{what}({type(owner).__name__}): {type(m).__name__} is not an FSDP module "
                             f"(call fully_shard on it first)")
        if s.group is not None:
            states.append(s)
    return tuple(states)


class _UnshardHandle:
    def __init__(self, group):
        self._group = group

    def wait(self):
        self._group.wait()


_fsdp_classes = {}


def _fsdp_class(cls):
    c = _fsdp_classes.get(cls)
    if c is None:
        c = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {"__call__": module_call})  # Note [Hook costs]
        _fsdp_classes[cls] = c
    return c


_REPLACED = {}  # id of a parameter fully_shard replaced by its shard -> (a weak reference to it, its name and owner)


def _replaced(p, label):
    key = id(p)
    _REPLACED[key] = (weakref.ref(p, lambda _, key=key: _REPLACED.pop(key, None)), label)


def _check_optimizer_params(optimizer, args, kwargs):
    """A global optimizer step pre-hook: an optimizer built before fully_shard holds the replaced parameters. It runs
    every step over every parameter, so it looks each up by id (a getattr that misses costs a raised AttributeError)."""
    replaced = _REPLACED
    for group in optimizer.param_groups:
        for p in group["params"]:
            entry = replaced.get(id(p))
            if entry is not None and entry[0]() is p:
                owner = entry[1]
                raise RuntimeError(f"{type(optimizer).__name__}.step(): it holds parameter {owner}, which fully_shard "
                                   f"replaced by its shard; build the optimizer after fully_shard (model.parameters() "
                                   f"then yields the shards)")


_optimizer_hook = None


def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(), ignored_params=None):
    """Shards `module`'s parameters (those no fully_shard call on a submodule took, minus ignored_params) on dim 0
    over `mesh` (a dtensor.torch DeviceMesh, 1-d or 2-d for HSDP; None: the whole world) and returns the module,
    now also an FSDPModule. reshard_after_forward: True (free after forward), False (keep until backward), or an
    int k (keep a 1/k share)."""
    global _optimizer_hook
    name = type(module).__name__
    if not isinstance(module, nn.Module):
        raise TypeError(f"fully_shard: expected an nn.Module, got {type(module).__name__}")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard({name}): this module is already sharded (fully_shard was called on it "
                         f"before); call it once per module, on the blocks first and the root last")
    if shard_placement_fn is not None:
        raise NotImplementedError(f"fully_shard({name}): shard_placement_fn is not supported: parameters are "
                                  f"sharded on dim 0")
    if mesh is None:  # the whole world, on the module's device kind
        first = next(module.parameters(), None)
        mesh = default_mesh("cuda" if first is not None and first.device.type == "cuda" else "cpu")
    mesh = as_mesh(mesh, f"fully_shard({name})")
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard({name}): the mesh must be 1-d (FSDP) or 2-d (HSDP: replicate, shard), got "
                         f"{mesh.ndim} dims {mesh.mesh_dim_names}; pass mesh['dp']")
    if not isinstance(reshard_after_forward, (bool, int)) or (not isinstance(reshard_after_forward, bool)
                                                              and reshard_after_forward < 1):
        raise ValueError(f"fully_shard({name}): reshard_after_forward must be True, False or a positive int, got "
                         f"{reshard_after_forward!r}")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"fully_shard({name}): mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy)}")
    ignored = {id(p) for p in (ignored_params or ())}
    # The parameters this call takes: not in an FSDP submodule's subtree, not ignored; each with every slot.
    taken, slots, order = {}, {}, []
    stack = [("", module)]
    while stack:
        prefix, m = stack.pop()
        for attr, p in m._parameters.items():
            if p is None or id(p) in ignored:
                continue
            if id(p) not in taken:
                taken[id(p)] = (prefix + attr, p)
                slots[id(p)] = []
                order.append(id(p))
            slots[id(p)].append((m, attr))
        children = [(prefix + n + ".", c) for n, c in m._modules.items()
                    if c is not None and not isinstance(c, FSDPModule)]
        stack.extend(reversed(children))
    named = [taken[k] for k in order]
    for pname, p in named:
        if p.device.type != mesh.device_type and not p.is_meta:  # meta: Note [Meta-device parameters]
            raise ValueError(f"fully_shard({name}): parameter {pname} is on {p.device} but the mesh is a "
                             f"{mesh.device_type} mesh; move the module with .to('{mesh.device_type}') first")
    state = _State(module, mesh, reshard_after_forward, mp_policy, offload_policy)
    if named:
        offload = isinstance(offload_policy, CPUOffloadPolicy) and mesh.device_type == "cuda"
        # The engine's reshard_after_forward: 1 frees, 0 keeps, k > 1 keeps a 1/k share; FSDP2's int is the world
        # size the parameters are resharded to after forward (1: each rank keeps them whole).
        keep = int(reshard_after_forward)
        if not isinstance(reshard_after_forward, bool):
            shard_size = mesh.shape[-1]
            keep = 0 if keep == 1 else 1 if keep >= shard_size else keep
        state.group = TorchParamGroup(name, mesh, named, [slots[k] for k in order], keep, mp_policy, offload)
        for (pname, p), m in zip(named, state.group.params):
            _replaced(p, f"{pname} of {name}")
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)  # the engine holds the shard
        state.group.show_sharded()
        register_group(state.group)
    module._dt_state = state
    install_hooks(module)
    module.__class__ = _fsdp_class(type(module))
    if _optimizer_hook is None:
        _optimizer_hook = register_optimizer_step_pre_hook(_check_optimizer_params)
    return module
