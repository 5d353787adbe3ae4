"""Named DTensor ops (sharding propagation picks the output placements); dtensor.op(name, ...) runs any of them."""
from .tensor import DTensor, op


def add(a, b):
    return op("add", a, b)


def sub(a, b):
    return op("sub", a, b)


def mul(a, b):
    return op("mul", a, b)


def matmul(a, b):
    return op("matmul", a, b)


def sum(x, dims, keepdim=False):  # noqa: A001 - PyTorch's name
    return op("sum", x, dims=list(dims), keepdim=keepdim)


def softmax(x, dim=-1):
    return op("softmax", x, dim=dim)


DTensor.__add__, DTensor.__sub__, DTensor.__mul__, DTensor.__matmul__ = add, sub, mul, matmul
