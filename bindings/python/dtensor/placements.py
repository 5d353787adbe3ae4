"""Placements: Shard(dim, order=-1), Replicate(), Partial(op) (PyTorch's names), and their text form."""
import ctypes
import operator
from dataclasses import dataclass, fields

from . import _lib

_REDUCE_OPS = tuple(sorted(_lib.REDUCE_OPS, key=_lib.REDUCE_OPS.get))  # by dt_reduce_op_t code


class Placement:
    """The base of Shard, Replicate and Partial: immutable values, one object per value.

    Note [Interned placements]: Shard(0) returns the same object every time (the constructors look the value up in
    _interned), so equality and hashing are object identity's, done in C: a placements tuple hashes and compares
    without running Python code, which is what makes redistribute's spec cache cheap (a lookup per call). Copies and
    pickles go through the constructor (__reduce__), so they are the interned object too."""

    def is_shard(self, dim=None):
        return isinstance(self, Shard) and (dim is None or self.dim == dim)

    def is_replicate(self):
        return isinstance(self, Replicate)

    def is_partial(self):
        return isinstance(self, Partial)

    @classmethod
    def _intern(cls, *values):
        """The one object of this class with these field values (made on first use)."""
        key = (cls, *values)
        p = _interned.get(key)
        if p is None:
            p = object.__new__(cls)
            for f, v in zip(fields(cls), values):
                object.__setattr__(p, f.name, v)  # frozen: only here
            p = _interned.setdefault(key, p)
        return p

    def __reduce__(self):
        return type(self), tuple(getattr(self, f.name) for f in fields(self))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


_interned = {}  # (class, *fields) -> the placement (Note [Interned placements])


# eq=False: identity equality and hashing (interned); init=False: __new__ makes (or finds) the object.
@dataclass(frozen=True, eq=False, init=False)
class Shard(Placement):
    """Splits tensor dim `dim` over a mesh dim (torch.chunk rules: trailing ranks may hold short or empty blocks).
    `order`: this mesh dim's position among the mesh dims sharding the same tensor dim (0 = outermost); -1: the
    default (ascending mesh dims)."""
    dim: int
    order: int = -1

    def __new__(cls, dim, order=-1):
        return cls._intern(operator.index(dim), operator.index(order))

    def _c(self):
        return _lib.Placement(_lib.DT_SHARD, self.dim, 0, self.order)

    def __str__(self):
        return f"S({self.dim})" + (f"[{self.order}]" if self.order >= 0 else "")


@dataclass(frozen=True, eq=False, init=False)
class Replicate(Placement):
    """Every coordinate of the mesh dim holds the whole tensor."""

    def __new__(cls):
        return cls._intern()

    def _c(self):
        return _lib.Placement(_lib.DT_REPLICATE, 0, 0, -1)

    def __str__(self):
        return "R"


@dataclass(frozen=True, eq=False, init=False)
class Partial(Placement):
    """Every coordinate holds a contribution; their reduction (sum, avg, max, min, product) is the value."""
    reduce_op: str = "sum"

    def __new__(cls, reduce_op="sum"):
        if reduce_op not in _REDUCE_OPS:
            raise ValueError(f"Partial: reduce_op must be one of {', '.join(_REDUCE_OPS)}, got {reduce_op!r}")
        return cls._intern(reduce_op)

    def _c(self):
        return _lib.Placement(_lib.DT_PARTIAL, 0, _lib.REDUCE_OPS[self.reduce_op], -1)

    def __str__(self):
        return f"P({self.reduce_op})"


def from_c(p):
    if p.kind == _lib.DT_SHARD:
        return Shard(p.dim, p.order)
    if p.kind == _lib.DT_PARTIAL:
        return Partial(_REDUCE_OPS[p.reduce_op])
    return Replicate()


def default_orders(placements):
    """Shard orders that are the default (ascending mesh dims) read as -1, so Shard(0) == Shard(0)."""
    by_dim = {}
    for i, p in enumerate(placements):
        if isinstance(p, Shard):
            by_dim.setdefault(p.dim, []).append(p.order)
    default = {d for d, orders in by_dim.items() if orders == list(range(len(orders)))}
    return tuple(Shard(p.dim) if isinstance(p, Shard) and p.dim in default else p for p in placements)


def parse_placements(text, tensor_ndim=-1):
    """The text form ("S(0),R", "S(0)[1],S(0)[0]", "P(sum),S(1)") as a list of placements."""
    out = (_lib.Placement * 16)()
    n = ctypes.c_int32(0)
    _lib.lib.dt_placements_parse(text.encode("utf-8"), tensor_ndim, out, 16, ctypes.byref(n))
    return list(default_orders([from_c(out[i]) for i in range(n.value)]))


def to_c(placements):
    """A (ctypes array, count) pair from placements: a sequence of Placement objects or their text form."""
    if isinstance(placements, str):
        placements = parse_placements(placements)
    elif isinstance(placements, Placement):
        placements = [placements]
    placements = list(placements)
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"placements: expected Shard, Replicate or Partial objects (or text like 'S(0),R'), "
                            f"got {type(p).__name__}")
    arr = (_lib.Placement * max(len(placements), 1))(*[p._c() for p in placements])
    return arr, len(placements)


def format_placements(placements):
    arr, n = to_c(placements)
    return _lib.text_out(_lib.lib.dt_placements_format, arr, n)
