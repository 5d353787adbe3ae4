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

Note [Gathered memory that moves]
reshard() returns a group's gathered memory to the pool and the next unshard() may fill memory at another address.
Autograd saves views of the parameters in forward (F.linear saves weight.t()) and reads them in backward, after the
group was resharded and gathered again. Every such view shares the unsharded face's storage object, so a gather that
moved re-points that storage itself at the new memory (UntypedStorage._swap_data_ptr_ with a storage over the new
memory, whose old pointer then goes with the temporary): the face, its views and whatever autograd saved read the
new values, with no saved-tensor hooks (which would cost every saved tensor of the forward two Python calls). The
first gather, or one whose size differs (none does: a parameter's gathered size is fixed), sets the face's .data.
Activation checkpointing's recomputation runs in backward after the pre-backward gather and reads the faces as they
are. (Parameters gathered by mapping the peers' shards on one host, Note [Gathering by mapping], keep their address;
the others move when the pool hands their freed block to another allocation in between: torch_cases.py's
moved_views forces that.)
"""
import functools

import torch
import torch.nn as nn

import dtensor
from . import _convert
from .mixed_precision import dtype_name
from ._hook_bodies import GroupBase


if not hasattr(torch.UntypedStorage, "_swap_data_ptr_"):  # Note [Gathered memory that moves] needs it
    raise ImportError(f"dtensor.torch: torch {torch.__version__} has no UntypedStorage._swap_data_ptr_, which "
                      f"re-points a gathered parameter's storage (Note [Gathered memory that moves]); upgrade torch")


class _Managed:
    __slots__ = ("name", "slots", "sharded", "unsharded", "shape", "block_shape", "requires_grad")


_PENDING = []  # groups made over meta-device parameters, in creation order (Note [Meta-device parameters])

# Note [Meta-device parameters]
# A model built under torch.device("meta") is sharded before it has values (torchtitan's order: parallelize_module,
# fully_shard, then model.to_empty(device=...), then its own initialization). fully_shard then shows each module a
# meta parameter of its shard's shape (of this rank's tensor-parallel block for a parameter parallelize_module split);
# to_empty replaces those by uninitialized ones on the device, and the program initializes them (each rank its own
# rows). The engine group is made at the first use that needs it (a forward, unshard(), a state dict): each shard is
# gathered into the whole parameter or block (HSDP: replica 0's shards first broadcast over the replicate dim, so
# that the replicas agree), the group is made over it as over a real module, and the program's
# parameter objects (which the optimizer may already hold) become views of the engine's shards. Every rank makes the
# groups in the order of its fully_shard calls, which is the same everywhere.


def materialize_pending():
    """Makes the engine groups of every fully_shard call over meta parameters so far (collective, in order)."""
    while _PENDING:
        _PENDING[0]._materialize()
        _PENDING.pop(0)


class TorchParamGroup(GroupBase):
    def __init__(self, label, mesh, named_params, slots, reshard_after_forward, mp_policy, offload):
        """named_params: [(qualified name, nn.Parameter)], slots: per parameter [(module, attribute)]."""
        self.label = label
        self.mesh = mesh
        self.params = []
        self.options = (reshard_after_forward, mp_policy, offload)
        self.group = None
        self.tp = []  # per parameter: (tp mesh, placements) or None
        self.grad_reduce = []  # per parameter: SequenceParallel's replica mesh or None
        meta = [p.is_meta for _, p in named_params]
        for (name, p), where in zip(named_params, slots):
            m = _Managed()
            m.name, m.slots, m.shape, m.requires_grad = name, where, tuple(p.shape), p.requires_grad
            m.block_shape = tuple(p.shape)  # this rank's block: the whole parameter, or its tensor-parallel block
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
        self.divide_factor = None  # set_gradient_divide_factor's (None: the engine's default, the average)
        self.force_sum = False  # set_force_sum_reduction_for_comms's
        self.received = 0
        if any(meta):
            if not all(meta):
                raise NotImplementedError(f"fully_shard({label}): meta-device parameters are taken when all of a "
                                          f"group's are on the meta device; materialize the module first (to_empty "
                                          f"and initialize)")
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
        if self.divide_factor is not None or self.force_sum:
            self.group.set_gradient_divide_factor(self._engine_factor())
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
                m.unsharded.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, i))
            reduce_over = self.grad_reduce[i]  # SequenceParallel's replicas
            if reduce_over is not None:
                from .collectives import all_reduce_copy
                m.unsharded.register_hook(lambda g, mesh=reduce_over: all_reduce_copy(g, mesh))
        self._bind()

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
            block = m.block_shape  # a tensor-parallel parameter's FSDP rows are those of this rank's block
            if not block:
                values.append(local)
                continue
            c = -(-block[0] // k)
            padded = local.new_zeros((c, *block[1:]))
            padded[:local.shape[0]] = local
            whole = local.new_empty((k * c, *block[1:]))
            all_gather_into_tensor(whole, padded, shard_mesh)
            values.append(whole[:block[0]].contiguous())
        self._make_group(values)
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded
        from .state_dict import register_group
        register_group(self)

    def show_sharded(self):
        for m in self.params:
            for module, attr in m.slots:
                module._parameters[attr] = m.sharded

    def _ensure_group(self):
        """The engine group of a meta-device module, made now (Note [Meta-device parameters])."""
        if self.group is None:
            materialize_pending()
        if self.group is None:
            raise RuntimeError(f"fully_shard({self.label}): the group was closed")

    def _rebuild_views(self):
        """Every unsharded face (and every view of it) pointed at the gathered memory (Note [Gathered memory that
        moves])."""
        for m, capsule in zip(self.params, self.group.export("unsharded_params")):
            new = torch.from_dlpack(capsule)
            face = m.unsharded
            storage = face.untyped_storage()
            nbytes = new.untyped_storage().nbytes()
            if nbytes and storage.nbytes() == nbytes and face.shape == new.shape:
                storage._swap_data_ptr_(new.untyped_storage())
            else:
                face.data = new

    def set_requires_gradient_sync(self, on):
        self.requires_gradient_sync = bool(on)
        if self.group is not None:
            self.group.set_requires_gradient_sync(on)

    def set_gradient_divide_factor(self, factor):
        factor = float(factor)
        if not factor > 0 or factor == float("inf"):
            raise ValueError(f"set_gradient_divide_factor({self.label}): the factor must be positive and finite, got "
                             f"{factor}")
        self.divide_factor = factor
        if self.group is not None:
            self.group.set_gradient_divide_factor(self._engine_factor())

    def set_force_sum_reduction_for_comms(self, enable):
        self.force_sum = bool(enable)
        if self.group is not None:
            self.group.set_gradient_divide_factor(self._engine_factor())

    def _engine_factor(self):
        """The engine's factor: set_gradient_divide_factor's; else, with force_sum, the data-parallel size given
        explicitly (the collectives sum, the sum is divided after, as FSDP2's force-sum reductions); else None (the
        collectives average)."""
        if self.divide_factor is not None:
            return self.divide_factor
        return float(self.mesh.size()) if self.force_sum else None

    def close(self):
        if self.group is not None:
            self.group.close()
            self.group = None
            self._bind()
