"""The bodies of fully_shard's per-step hooks, in Python: the base classes of TorchParamGroup (gathering, resharding,
gradient hand-offs) and of the FSDP module state (the module call and the pre-backward hook). dtensor/_fsdp_hooks.c (in
the compiled _speedups) has the same two bases and the same module call in C; they are used when it is present, these
otherwise (DTENSOR_NO_SPEEDUPS, no compiler); the compiled ones' autograd hooks and gradient hand-offs go through the
libtorch bridge where it builds (Note [The libtorch bridge] in _bridge.py). All behave the same: the test suite runs
each way.

Note [Hook costs]
A step crosses every sharded block's hooks five times (the call, the pre-backward hook, a gradient hook per
parameter), and a block can be as small as one Linear: the hooks' own cost is then most of the block's. So FSDP
modules are called through their class's __call__ (no forward hooks, whose dispatch runs nn.Module's slow call
path), the pre-backward and gradient hooks are the bases' own methods (C functions when compiled), what the call
needs (prefetch targets, whether to reshard) is decided once, when the forward order or a setting changes, not per
call (StateHooks.fast and the fields beside it), and the compiled bodies call the C API directly. The slow cases
(the root, the first forward, mixed-precision casts, non-tensor outputs, meta-device groups) go through Python.
"""
import ctypes

import torch

import dtensor

_to_dlpack_versioned = getattr(torch._C, "_to_dlpack_versioned", None)  # a CPU tensor's capsule, without the protocol


def grad_capsule(t):
    """An unused DLPack capsule of a gradient's block (contiguous)."""
    if not t.is_contiguous():
        t = t.contiguous()
    if _to_dlpack_versioned is not None and not t.is_cuda:
        return _to_dlpack_versioned(t)
    return dtensor.tensor.producer_capsule(t)  # the protocol: CUDA work ordered before dtensor's stream


# Note [Not the last backward]
# set_is_last_backward(False) (FSDP2's, for microbatches) lets a backward end without waiting for its last reduction:
# the group reduced last is still in flight when the callback at the end of backward runs, and
# finish_backward(wait=False) leaves it so while the next microbatch's forward runs. Its gradient shards reach .grad
# when the next backward starts a reduction (one in flight at a time: the previous one is collected first) or at the
# end of the last backward (wait=True), which also collects what an earlier backward left in flight. Until then that
# group's .grad lacks the microbatch: the optimizer steps after a last backward, as with FSDP2.


class GroupHooks:
    """A group's per-step work. Fields (the compiled base has them as members): group (the FsdpParamGroup),
    gathered, unshard_issued, reduce_issued, reshard_after_backward, requires_gradient_sync, early_reshard,
    trainable, pending, received. The subclass provides params, _ensure_group() (makes a meta-device group),
    _rebuild_views() (the unsharded faces pointed at moved memory, Note [Gathered memory that moves]) and calls
    _bind() whenever the engine group or a parameter object changes."""

    _in_flight = [None]  # the group whose reduce-scatter was started last and not waited for

    def _bind(self):
        self.view_ptrs = None  # the addresses the unsharded faces view (None: no views yet)
        self.versions = None  # the shards' versions at the last gather

    def unshard(self, async_op=True):
        if self.group is None:
            self._ensure_group()
        if self.gathered and self._stale():
            self.reshard()
        if not self.unshard_issued and not self.gathered:
            self.group.unshard(async_op)
            self.unshard_issued = True

    def wait(self):
        """Finishes the gather and points every unsharded face (and the modules' slots) at the gathered memory."""
        if self.gathered:
            return
        if self.group is None:
            self._ensure_group()
        group = self.group
        if not self.unshard_issued:
            group.unshard(False)
        group.wait_unshard()
        self.unshard_issued = False
        ptrs = group.unsharded_data()
        if ptrs != self.view_ptrs:  # a gather moved some (Note [Gathered memory that moves])
            self._rebuild_views()
            self.view_ptrs = ptrs
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.unsharded
        self.versions = [m.sharded._version for m in self.params]
        self.gathered = True

    def _stale(self):
        """Whether a shard changed (an optimizer step) since the gather: kept gathered parameters (no reshard after
        backward) are then gathered again. Every rank steps alike, so every rank decides alike."""
        return any(m.sharded._version != v for m, v in zip(self.params, self.versions))

    def reshard(self, post_forward=False):
        if not self.gathered:
            if self.unshard_issued:  # prefetched but not used: finish the collective before freeing
                self.group.wait_unshard()
                self.unshard_issued = False
                self.group.reshard(post_forward)
            return
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded
        self.group.reshard(post_forward)
        self.gathered = False

    def _grad_ready(self, i, p):
        """Parameter i's post-accumulate-grad hook (p: its unsharded face)."""
        g = p.grad
        p.grad = None
        if g is None:
            return
        self.group.accumulate_grad_dlpack(i, grad_capsule(g))
        self.received += 1
        self.pending -= 1
        if self.pending == 0:
            self.reduce()
            if self.early_reshard and self.reshard_after_backward:
                self.reshard()

    def reduce(self):
        """Starts the reduce-scatter of the gradients received (kept unsharded when gradient sync is off). The
        previous group's reduction is finished first, as FSDP2 does: one in flight at a time, so that its unsharded
        gradients (which the reduce-scatter may read in place) are freed while backward goes on."""
        if self.received:
            previous = GroupHooks._in_flight[0]
            if previous is not None and previous is not self:
                previous.collect()
            self.group.reduce_grads()
            self.reduce_issued = self.requires_gradient_sync
            if self.reduce_issued:
                GroupHooks._in_flight[0] = self
        self.received = 0

    def collect(self):
        """Waits for this group's reduction; the reduced shards become (or are added to) the sharded faces' .grad."""
        if GroupHooks._in_flight[0] is self:
            GroupHooks._in_flight[0] = None
        if not self.reduce_issued:
            return
        self.group.wait_reduce()
        self.reduce_issued = False
        for m, capsule in zip(self.params, self.group.export("sharded_grads")):
            if capsule is None:
                continue
            grad = torch.from_dlpack(capsule)  # a view of the reduce-scatter output; it keeps the block alive
            if grad.dtype != m.sharded.dtype:
                grad = grad.to(m.sharded.dtype)
            if m.sharded.grad is None:
                m.sharded.grad = grad
            else:
                m.sharded.grad += grad

    def finish_backward(self, wait=True):
        """After backward: every reduction started, the gradient shards set (wait=False: a reduction still in flight
        is left to finish later, Note [Not the last backward]), the group resharded."""
        if self.pending != self.trainable:
            self.reduce()  # some parameters got no gradient this step
        self.pending = self.trainable
        if wait:
            self.collect()
            previous = GroupHooks._in_flight[0]  # left by an earlier backward that was not the last
            if previous is not None:
                previous.collect()
        if self.reshard_after_backward:
            self.reshard()


# Note [The pre-backward hook's node]
# The pre-backward hook goes on each output's autograd node (grad_fn.register_prehook): the node runs it just before
# it runs, which is when a tensor hook on the output would run (the output's gradient complete), for about 1 us less a
# call than Tensor.register_hook's Python. An output without a node (a leaf that requires grad) takes a tensor hook.
# Several outputs of one node register it several times; pre_backward_done makes the later calls no-ops.


class StateHooks:
    """An FSDP module's per-call work. Fields (members in the compiled base): group (its TorchParamGroup or None),
    ctx, fast (the call may take the fast path: set by refresh() in the subclass), reshard_post (reshard after
    forward), forward_targets / backward_targets (the groups to prefetch), pre_backward_done, inner_call (the
    module class's own __call__). The subclass provides call() (every case) and _queue_final()."""

    def _pre_backward_hook(self, grad):
        """A hook on each forward output: the group gathered again before the backward nodes that read it."""
        if self.pre_backward_done:
            return None
        self.pre_backward_done = True
        if not self.ctx.callback_queued:
            self._queue_final()
        group = self.group
        if group is not None:
            group.unshard()
            group.wait()
            for target in self.backward_targets:
                target.unshard()
        return None


def finish_all(order, states, wait):
    """The end of backward over a root's modules (order: those with a group, in forward order): every group that
    gathered or was prefetched finishes its backward (Note [Not the last backward] for wait), last module first;
    every module's pre-backward flag is cleared."""
    for s in reversed(order):
        if s.pre_backward_done or s.group.gathered or s.group.unshard_issued:
            s.group.finish_backward(wait)
    for s in states:
        s.pre_backward_done = False


def fsdp_call(module, *args, **kwargs):
    """An FSDP module's __call__: pre-forward, the module's own call, post-forward."""
    return module._dt_state.call(module, args, kwargs)


_compiled = dtensor._lib.speedups
if _compiled is not None and hasattr(_compiled, "FsdpGroupBase"):
    _addresses = tuple(ctypes.cast(getattr(dtensor._lib.lib, "dt_fsdp_group_" + name), ctypes.c_void_p).value
                       for name in ("unshard", "wait_unshard", "reshard", "unsharded_data", "export",
                                    "accumulate_grad_dlpack", "reduce_grads", "wait_reduce"))
    _compiled.fsdp_setup(_addresses, torch.Tensor, _to_dlpack_versioned, torch._C._from_dlpack, torch.is_grad_enabled,
                         torch._C._current_graph_task_id, grad_capsule)
    GroupBase, StateBase, finish_all = _compiled.FsdpGroupBase, _compiled.FsdpStateBase, _compiled.fsdp_finish_all
    from . import _bridge
    _table = _bridge.load()
    _compiled.fsdp_bridge(_table)
    bridged = _table is not None  # Note [The libtorch bridge]
    module_call = _compiled.fsdp_call
else:
    GroupBase, StateBase, module_call = GroupHooks, StateHooks, fsdp_call
    bridged = False
