"""The saved-tensor hooks of the forward of a sharded model (Note [Saved tensors of gathered parameters])."""
import torch

from ._hook_bodies import RegistryBase

# Note [Saved tensors of gathered parameters]
# reshard() frees a group's gathered memory and the next unshard() fills new memory, possibly at another address
# (the engine's storage keeps its identity, but a DLPack view holds the raw address). Autograd saves views of the
# parameters in forward (F.linear saves weight.t()) and reads them in backward, after the group was resharded and
# gathered again: a saved view would read freed memory. So the root's forward runs under saved_tensors_hooks that save
# a view of a gathered parameter as (parameter, view, the parameter's address, the view's offset). In backward the
# view is itself when the pre-backward hook gathered the parameter where it was (most gathers: the pool hands the
# freed block back), and is rebuilt over the parameter's current data otherwise. Other tensors pass as they are.
# Activation checkpointing's own hooks take precedence inside checkpointed regions; their recomputation runs in
# backward, after the pre-backward gather, so it saves views of the current memory. (Parameters gathered by mapping the
# peers' shards on one host, Note [Gathering by mapping], keep their address; the others move when the pool hands
# their freed block to another allocation in between: torch_cases.py's moved_views forces that.)


class GatheredRegistry(RegistryBase):
    """The gathered parameters (the base: RegistryHooks or its compiled twin, which also hold the pack and unpack
    hooks), and the hooks' installation around the root's forward."""

    def __init__(self):
        super().__init__()
        self._hooks = None

    def enter(self):
        """Installs the hooks (the root's pre-forward); exit() removes them (its post-forward)."""
        if self._hooks is None:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._hooks.__enter__()

    def exit(self):
        hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(None, None, None)


REGISTRY = GatheredRegistry()  # one per process: the gathered memory of every group (addresses are unique)
