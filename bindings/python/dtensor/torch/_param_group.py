"""One fully_shard call's parameters as a dtensor FSDP engine group, seen from PyTorch.

Each managed parameter has two torch faces, both nn.Parameters that keep their identity for the module's life:
  sharded    a DLPack view of the engine's shard (the only persistent copy): what module.parameters() yields
             between steps and the optimizer updates in place; .grad is the reduced gradient shard
  unsharded  a leaf whose .data is set to a view of the gathered memory after each unshard: what the module's
             forward reads and autograd accumulates into (its post-accumulate-grad hook hands the gradient to the
             engine)
The module's parameter slots (every place the parameter is registered: shared parameters have several) hold the
unsharded face while gathered and the sharded one otherwise, as FSDP2's do.

Note [Hook hand-offs]
The hooks run per block per step, so each crosses into the engine once per group and makes no tensor handles: the
gathered values' addresses come in one call (dt_fsdp_group_unsharded_data) and views are rebuilt only when a gather
moved them (one DLPack export of the group; rare: a released storage asks the pool for its last block,
core/allocator.h, which took a tiny-block model from 5827 moves in 7000 gathers to 150); each gradient goes to the
engine as a DLPack capsule of its block (taken over, zero copy); the reduced gradient shards come out as one export.
dtensor's handles (DTensor) appear only when the group is made and in state dicts.
"""
import torch
import torch.nn as nn

import dtensor
from . import _convert
from .mixed_precision import dtype_name


_in_flight = [None]  # the group whose reduce-scatter was started last and not waited for
_to_dlpack_versioned = getattr(torch._C, "_to_dlpack_versioned", None)  # a CPU tensor's capsule, without the protocol


def _grad_capsule(t):
    """An unused DLPack capsule of a gradient's block (contiguous)."""
    if not t.is_contiguous():
        t = t.contiguous()
    if _to_dlpack_versioned is not None and t.device.type == "cpu":
        return _to_dlpack_versioned(t)
    return dtensor.tensor.producer_capsule(t)  # the protocol: CUDA work ordered before dtensor's stream


class _Managed:
    __slots__ = ("name", "slots", "sharded", "unsharded", "shape", "requires_grad")


_PENDING = []  # groups made over meta-device parameters, in creation order (Note [Meta-device parameters])

# Note [Meta-device parameters]
# A model built under torch.device("meta") is sharded before it has values (torchtitan's order: fully_shard, then
# model.to_empty(device=...), then its own initialization). fully_shard then shows each module a meta parameter of
# its shard's shape; to_empty replaces those by uninitialized ones on the device, and the program initializes them
# (each rank its own rows). The engine group is made at the first use that needs it (a forward, unshard(), a state
# dict): each shard is gathered into the whole parameter (HSDP: replica 0's shards first broadcast over the
# replicate dim, so that the replicas agree), the group is made over it as over a real module, and the program's
# parameter objects (which the optimizer may already hold) become views of the engine's shards. Every rank makes the
# groups in the order of its fully_shard calls, which is the same everywhere.


def materialize_pending():
    """Makes the engine groups of every fully_shard call over meta parameters so far (collective, in order)."""
    while _PENDING:
        _PENDING[0]._materialize()
        _PENDING.pop(0)


class TorchParamGroup:
    def __init__(self, label, mesh, named_params, slots, reshard_after_forward, mp_policy, offload, registry):
        """named_params: [(qualified name, nn.Parameter)], slots: per parameter [(module, attribute)]."""
        self.label = label
        self.mesh = mesh
        self.registry = registry
        self.params = []
        self.options = (reshard_after_forward, mp_policy, offload)
        self.group = None
        self.tp = []  # per parameter: (tp mesh, placements) or None
        self.grad_reduce = []  # per parameter: SequenceParallel's replica mesh or None
        meta = [p.is_meta for _, p in named_params]
        for (name, p), where in zip(named_params, slots):
            m = _Managed()
            m.name, m.slots, m.shape, m.requires_grad = name, where, tuple(p.shape), p.requires_grad
            m.sharded = None
            tp = getattr(p, "_dt_tp", None)  # (tp mesh, placements, global shape) from parallelize_module
            if tp is not None:
                tp_mesh, placements, shape = tp
                if getattr(tp_mesh, "_root", tp_mesh) is not getattr(mesh, "_root", mesh):
                    raise ValueError(f"fully_shard({label}): parameter {name} is tensor-parallel on a mesh that is "
                                     f"not a sub-mesh of the FSDP mesh's: take both from one init_device_mesh")
                m.shape = tuple(shape)
                self.tp.append((tp_mesh, placements))
            else:
                self.tp.append(None)
            self.grad_reduce.append(getattr(p, "_dt_grad_all_reduce", None))
            self.params.append(m)
        self.trainable = sum(1 for m in self.params if m.requires_grad)
        self.early_reshard = self.trainable == len(self.params)  # Note [Resharding after backward]
        self.pending = self.trainable
        self.gathered = False  # the unsharded faces view the gathered memory
        self.unshard_issued = False
        self.reduce_issued = False
        self.reshard_after_backward = True
        self.requires_gradient_sync = True
        self.received = 0
        self.view_ptrs = [False] * len(self.params)  # the addresses the unsharded faces view (False: none yet)
        self.versions = None  # the shards' versions at the last gather
        if any(meta):
            if not all(meta) or any(self.tp):
                raise NotImplementedError(f"fully_shard({label}): meta-device parameters are taken when all of a "
                                          f"group's are on the meta device and none is tensor-parallel; "
                                          f"materialize the module first (to_empty and initialize)")
            k, r = mesh.shape[-1], mesh.get_coordinate()[-1]
            for m, (_, p) in zip(self.params, named_params):
                shape = list(p.shape)
                if shape:
                    c = -(-shape[0] // k)
                    shape[0] = max(0, min(shape[0], (r + 1) * c) - r * c)  # torch.chunk's rows
                m.sharded = nn.Parameter(torch.empty(shape, dtype=p.dtype, device="meta"),
                                         requires_grad=m.requires_grad)
            _PENDING.append(self)
        else:
            self._make_group([p.detach() for _, p in named_params])

    def _make_group(self, values):
        """The engine group over the parameters' whole values (each rank's tensor-parallel block), and the faces."""
        reshard_after_forward, mp_policy, offload = self.options
        mesh, full = self.mesh, []
        for m, v, tp in zip(self.params, values, self.tp):
            if tp is not None:
                full.append(_convert.to_dt(v, tp[0], tp[1], m.shape))
            else:
                full.append(_convert.to_dt(v, mesh, [dtensor.Replicate()] * mesh.ndim))
        opts = {}
        if mp_policy.param_dtype is not None:
            opts["param_dtype"] = dtype_name(mp_policy.param_dtype)
        if mp_policy.reduce_dtype is not None:
            opts["reduce_dtype"] = dtype_name(mp_policy.reduce_dtype)
        # The engine clones its shard out of each block (fsdp/layout.cc make_shard): the blocks are the module's
        # own memory, freed by the caller once the group exists.
        self.group = dtensor.FsdpParamGroup(
            mesh.dt_mesh, full, names=[m.name for m in self.params], name=self.label,
            reshard_after_forward=reshard_after_forward, param_dtype=opts.get("param_dtype"),
            reduce_dtype=opts.get("reduce_dtype"), cpu_offload=offload)
        for f in full:
            f.close()
        if not self.requires_gradient_sync:
            self.group.set_requires_gradient_sync(False)
        gathered_dtype = mp_policy.param_dtype
        for i, m in enumerate(self.params):
            shard = self.group.sharded_param(i)
            if m.sharded is None:
                m.sharded = nn.Parameter(torch.from_dlpack(shard), requires_grad=m.requires_grad)
            else:  # the program's parameter object (Note [Meta-device parameters]) becomes a view of the shard
                m.sharded.data = torch.from_dlpack(shard)
            shard.close()
            dtype = gathered_dtype if gathered_dtype is not None and torch.is_floating_point(m.sharded) else \
                m.sharded.dtype
            m.unsharded = nn.Parameter(torch.empty(0, dtype=dtype, device=m.sharded.device),
                                       requires_grad=m.requires_grad)
            if m.requires_grad:
                m.unsharded.register_post_accumulate_grad_hook(lambda p, i=i: self._grad_ready(i, p))
            reduce_over = self.grad_reduce[i]  # SequenceParallel's replicas
            if reduce_over is not None:
                from .collectives import all_reduce_copy
                m.unsharded.register_hook(lambda g, mesh=reduce_over: all_reduce_copy(g, mesh))

    def _materialize(self):
        """Note [Meta-device parameters]: the group from the parameters the program initialized."""
        from .collectives import all_gather_into_tensor, broadcast
        mesh, values = self.mesh, []
        shard_mesh = mesh[mesh.mesh_dim_names[-1]] if mesh.ndim > 1 else mesh
        k = mesh.shape[-1]
        for m in self.params:
            module, attr = m.slots[0]
            current = module._parameters.get(attr)
            if current is None or current.is_meta:
                raise RuntimeError(f"fully_shard({self.label}): parameter {m.name} is still on the meta device; call "
                                   f"model.to_empty(device=...) and initialize the parameters before the first "
                                   f"forward, unshard() or state dict")
            if tuple(current.shape) != tuple(m.sharded.shape):
                raise RuntimeError(f"fully_shard({self.label}): parameter {m.name} has shape {tuple(current.shape)}, "
                                   f"its shard {tuple(m.sharded.shape)}: replace a meta parameter only by to_empty")
            m.sharded = current  # to_empty made a new parameter object: the program (and its optimizer) holds it
            local = current.detach()
            if mesh.ndim > 1:  # HSDP: the replicas take replica 0's rows
                broadcast(local, 0, mesh[mesh.mesh_dim_names[0]])
            if not m.shape:
                values.append(local)
                continue
            c = -(-m.shape[0] // k)
            padded = local.new_zeros((c, *m.shape[1:]))
            padded[:local.shape[0]] = local
            whole = local.new_empty((k * c, *m.shape[1:]))
            all_gather_into_tensor(whole, padded, shard_mesh)
            values.append(whole[:m.shape[0]].contiguous())
        self._make_group(values)
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded
        from .state_dict import register_group
        register_group(self)

    # ---- gathering
    def unshard(self, async_op=True):
        if self.group is None:
            materialize_pending()
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
            materialize_pending()
        group = self.group
        if not self.unshard_issued:
            group.unshard(False)
        group.wait_unshard()
        self.unshard_issued = False
        ptrs = group.unsharded_data()
        params = self.params
        if ptrs != self.view_ptrs:  # a gather moved some: new views of the group (Note [Hook hand-offs])
            for m, capsule in zip(params, group.export("unsharded_params")):
                m.unsharded.data = torch.from_dlpack(capsule)
            self.view_ptrs = ptrs
        by_address = self.registry.by_address
        for m, ptr in zip(params, ptrs):
            if ptr is not None:
                by_address[ptr] = m.unsharded
            for module, attr in m.slots:
                module._parameters[attr] = m.unsharded
        self.versions = [m.sharded._version for m in params]
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
            else:
                return
        by_address = self.registry.by_address
        for m, ptr in zip(self.params, self.view_ptrs):
            by_address.pop(ptr, None)
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded
        self.group.reshard(post_forward=post_forward)
        self.gathered = False

    def show_sharded(self):
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded

    # ---- gradients
    def _grad_ready(self, i, p):
        g = p.grad
        p.grad = None
        if g is None:
            return
        self.group.accumulate_grad_dlpack(i, _grad_capsule(g))
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
            previous = _in_flight[0]
            if previous is not None and previous is not self:
                previous.collect()
            self.group.reduce_grads()
            self.reduce_issued = self.requires_gradient_sync
            if self.reduce_issued:
                _in_flight[0] = self
        self.received = 0

    def collect(self):
        """Waits for this group's reduction; the reduced shards become (or are added to) the sharded faces' .grad."""
        if _in_flight[0] is self:
            _in_flight[0] = None
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

    def finish_backward(self):
        """After backward: every reduction finished, the gradient shards set, the group resharded."""
        if self.pending != self.trainable:
            self.reduce()  # some parameters got no gradient this step
        self.pending = self.trainable
        self.collect()
        if self.reshard_after_backward:
            self.reshard()

    def set_requires_gradient_sync(self, on):
        self.requires_gradient_sync = bool(on)
        if self.group is not None:
            self.group.set_requires_gradient_sync(on)

    def close(self):
        if self.group is not None:
            self.group.close()
