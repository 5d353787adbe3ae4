"""Placements: Shard(dim, order=-1), Replicate(), Partial(op) (PyTorch's names), and their text form."""
import ctypes
from dataclasses import dataclass

from . import _lib

_REDUCE_OPS = ("sum", "avg", "max", "min", "product")


class Placement:
    """The base of Shard, Replicate and Partial."""

    def is_shard(self, dim=None):
        return isinstance(self, Shard) and (dim is None or self.dim == dim)

    def is_replicate(self):
        return isinstance(self, Replicate)

    def is_partial(self):
        return isinstance(self, Partial)


@dataclass(frozen=True)
class Shard(Placement):
    """Splits tensor dim `dim` over a mesh dim (torch.chunk rules: trailing ranks may hold short or empty blocks).
    `order`: this mesh dim's position among the mesh dims sharding the same tensor dim (0 = outermost); -1: the
    default (ascending mesh dims)."""
    dim: int
    order: int = -1

    def _c(self):
        return _lib.Placement(_lib.DT_SHARD, self.dim, 0, self.order)

    def __str__(self):
        return f"S({self.dim})" + (f"[{self.order}]" if self.order >= 0 else "")


@dataclass(frozen=True)
class Replicate(Placement):
    """Every coordinate of the mesh dim holds the whole tensor."""

    def _c(self):
        return _lib.Placement(_lib.DT_REPLICATE, 0, 0, -1)

    def __str__(self):
        return "R"


@dataclass(frozen=True)
class Partial(Placement):
    """Every coordinate holds a contribution; their reduction (sum, avg, max, min, product) is the value."""
    reduce_op: str = "sum"

    def __post_init__(self):
        if self.reduce_op not in _REDUCE_OPS:
            raise ValueError(f"Partial: reduce_op must be one of {', '.join(_REDUCE_OPS)}, got {self.reduce_op!r}")

    def _c(self):
        return _lib.Placement(_lib.DT_PARTIAL, 0, _REDUCE_OPS.index(self.reduce_op), -1)

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
