"""CommDebugMode: the collectives this thread issues, counted and sized per kind under named scopes, forward and
backward apart (PyTorch's torch.distributed.tensor.debug.CommDebugMode, over dtensor's; dtensor/comm_debug.h).

    with dtensor.CommDebugMode() as mode:
        with mode.scope("layers.0"):
            y = x.redistribute([dtensor.Replicate(), dtensor.Replicate()])
    mode.counts()            # {"all_gather": 2}: Global's calls per kind
    print(mode.table())      # every scope, indented, per phase: "all_gather: 2 (96 B)"
    mode.json()              # {"scopes": [{"name", "depth", "forward": {"all_gather": {"calls", "bytes"}}, ...}]}

A framework's hooks enter and exit its modules' names (scope / enter / exit); calls outside every scope count under
"Global" only, in phase "outside".
"""
import contextlib
import ctypes
import json as _json

from . import _lib
from ._handle import Handle


class CommDebugMode(Handle):
    _destroy = staticmethod(_lib.lib.dt_comm_debug_destroy)

    def __init__(self):
        out = ctypes.c_void_p()
        _lib.lib.dt_comm_debug_create(ctypes.byref(out))
        super().__init__(out.value)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False  # the counts stay readable; close() releases the handle

    def declare(self, name, depth):
        """Places scope `name` at `depth` (1: the root) in the table before it is entered."""
        _lib.lib.dt_comm_debug_declare(self._h, name.encode(), int(depth))

    def enter(self, name, backward=False):
        _lib.lib.dt_comm_debug_enter(self._h, name.encode(), 1 if backward else 0)

    def exit(self, name, backward=False):
        _lib.lib.dt_comm_debug_exit(self._h, name.encode(), 1 if backward else 0)

    @contextlib.contextmanager
    def scope(self, name, backward=False):
        """Counts the calls made inside under `name` (and under the scopes around it)."""
        self.enter(name, backward)
        try:
            yield self
        finally:
            self.exit(name, backward)

    def json(self):
        return _json.loads(_lib.text_out(_lib.lib.dt_comm_debug_json, self._h))

    def table(self):
        return _lib.text_out(_lib.lib.dt_comm_debug_text, self._h)

    def counts(self, scope="Global"):
        """{kind: calls} of one scope over every phase."""
        out = {}
        for s in self.json()["scopes"]:
            if s["name"] == scope:
                for phase in ("forward", "backward", "outside"):
                    for kind, c in s.get(phase, {}).items():
                        out[kind] = out.get(kind, 0) + c["calls"]
        return out

    def __repr__(self):
        return f"CommDebugMode({self.counts()})"
