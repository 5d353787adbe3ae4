"""Sharded checkpoints: a map from names to DTensors, saved from one layout and loaded into any other."""
import ctypes
import json

from . import _lib
from .tensor import Work


def _names_and_handles(tensors):
    names = list(tensors.keys())
    handles = (ctypes.c_void_p * max(len(names), 1))(*[tensors[k].handle for k in names])
    return _lib.cstr_array(names), handles, len(names)


def save_checkpoint(path, tensors, metadata=None, async_save=False):
    """Saves {name: DTensor} (and metadata: a dict of scalars) into the folder `path`; collective. async_save: returns
    a Work once the blocks are copied aside (wait() finishes the save); otherwise None when complete on disk."""
    names, handles, n = _names_and_handles(tensors)
    meta = json.dumps(metadata).encode() if metadata is not None else None
    if async_save:
        h = ctypes.c_void_p()
        _lib.lib.dt_checkpoint_save(str(path).encode(), names, handles, n, meta, ctypes.byref(h))
        return Work(h.value)
    _lib.lib.dt_checkpoint_save(str(path).encode(), names, handles, n, meta, None)
    return None


def load_checkpoint(path, tensors, strict=True):
    """Loads into the given {name: DTensor} in place, from any layout; returns the checkpoint's metadata (a dict)."""
    names, handles, n = _names_and_handles(tensors)
    text = _lib.text_out(_lib.lib.dt_checkpoint_load, str(path).encode(), names, handles, n, 1 if strict else 0)
    return json.loads(text) if text else {}


def save(path, state_dict, metadata=None, async_save=False):
    """save_checkpoint under the name PyTorch's distributed checkpoint uses (dtensor.checkpoint.save(path, sd))."""
    return save_checkpoint(path, state_dict, metadata=metadata, async_save=async_save)


def load(path, state_dict, strict=True):
    """load_checkpoint under the name PyTorch's distributed checkpoint uses: in place, from any layout."""
    return load_checkpoint(path, state_dict, strict=strict)
