#!/usr/bin/env python3
"""The Python package's checks, one case per run, on the ranks dtrun starts (test_dtensor_package.py launches them).

usage: dtensor_cases.py CASE [ARGS]   (under dtrun --nproc-per-node N)

Every value is checked against NumPy on the full tensors, with blocks computed here from torch.chunk's rule (not the
library's layout code). Exit 0 when every check holds, 1 otherwise (the failures are printed with the rank).
"""
import ctypes
import gc
import re
import sys

import numpy as np

import dtensor as dt
from dtensor import Partial, Replicate, Shard

failures = []
world = None  # set in main: the launcher's world, or an explicit one (case explicit_init)
RANK = SIZE = 0


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAILED: {what}", flush=True)


def mesh_2d():
    """A (a, b) mesh of every rank: (1, 1), (1, 2), (2, 2)."""
    a = 2 if SIZE >= 4 else 1
    return dt.DeviceMesh(world, "cpu", (a, SIZE // a), ("dp", "tp"))


def chunk(n, k, c):
    """torch.chunk's block c of n over k: (begin, end)."""
    cs = -(-n // k) if n else 0
    return min(c * cs, n), min((c + 1) * cs, n)


def block(shape, mesh_shape, placements, coord):
    """(begin, end) per tensor dim of the block at coord: mesh dims sharding one tensor dim split it in their order
    (Shard.order, else ascending mesh dims), outermost first."""
    ranges = [(0, n) for n in shape]
    by_dim = {}
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            d = p.dim % len(shape)
            by_dim.setdefault(d, []).append((p.order if p.order >= 0 else m, m))
    for d, mdims in by_dim.items():
        for _, m in sorted(mdims):
            b, e = ranges[d]
            lb, le = chunk(e - b, mesh_shape[m], coord[m])
            ranges[d] = (b + lb, b + le)
    return ranges


def expected_local(full, mesh, placements):
    r = block(full.shape, mesh.shape, placements, mesh.coordinate)
    return full[tuple(slice(b, e) for b, e in r)]


def random_full(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).integers(-50, 50, size=shape).astype(dtype)


SPECS_2D = [
    [Shard(0), Replicate()], [Replicate(), Shard(1)], [Shard(0), Shard(1)], [Shard(1), Shard(0)],
    [Shard(0), Shard(0)], "S(0)[1],S(0)[0]", [Replicate(), Replicate()],
]
SHAPES = [(8, 6), (5, 7), (3, 2), (1, 3)]  # even, uneven, empty blocks on 4 ranks


def spec_list(s):
    return dt.parse_placements(s) if isinstance(s, str) else s


def case_meshes():
    mesh = mesh_2d()
    a, b = mesh.shape
    check(mesh.ndim == 2 and mesh.size() == SIZE, f"mesh shape {mesh.shape}")
    check(mesh.coordinate == (RANK // b, RANK % b), f"coordinate {mesh.coordinate}")
    tp = mesh["tp"]
    check(tp.shape == (b,) and tp.coordinate == (RANK % b,), f"mesh['tp'] {tp.shape} {tp.coordinate}")
    dp = mesh["dp"]
    check(dp.shape == (a,) and dp.coordinate == (RANK // b,), f"mesh['dp'] {dp.shape} {dp.coordinate}")
    flat = mesh.flatten(("dp", "tp"), "all")
    check(flat.shape == (SIZE,) and flat.coordinate == (RANK,), f"flatten {flat.shape} {flat.coordinate}")
    check(repr(mesh).startswith("DeviceMesh("), repr(mesh))
    one_d = dt.DeviceMesh(None, "cpu", (SIZE,))
    check(one_d.shape == (SIZE,), "1-d mesh on the default world")
    # a tensor on the sub-mesh
    full = random_full((5, 4), 3)
    x = dt.distribute_tensor(full, tp, [Shard(0)])
    check(np.array_equal(x.full_tensor(), full), "full_tensor on a sub-mesh")
    check(dt.Shard(0) == dt.parse_placements("S(0)")[0] and dt.format_placements([Shard(0), Replicate()]) == "S(0),R",
          "placement text form")


def case_placements():
    mesh = mesh_2d()
    for si, shape in enumerate(SHAPES):
        full = random_full(shape, si)
        for s in SPECS_2D:
            spec = spec_list(s)
            x = dt.distribute_tensor(full, mesh, spec)
            exp = expected_local(full, mesh, spec)
            r = block(shape, mesh.shape, spec, mesh.coordinate)
            check(x.shape == shape and x.local_shape == exp.shape, f"{shape} {s}: local shape {x.local_shape}")
            check(x.local_offset == tuple(b for b, _ in r), f"{shape} {s}: offset {x.local_offset}")
            check(np.array_equal(x.to_local(), exp), f"{shape} {s}: to_local")
            check(np.array_equal(x.full_tensor(), full), f"{shape} {s}: full_tensor")
            check(list(x.placements) == list(dt.parse_placements(s) if isinstance(s, str) else spec) or
                  isinstance(s, str), f"{shape} {s}: placements {x.placements}")
            check(x.dtype == np.float64 and x.dtype_name == "float64", "dtype")
            # from src_rank 0 only: the others pass None
            y = dt.distribute_tensor(full if RANK == 0 else None, mesh, spec, src_rank=0, shape=shape,
                                     dtype=np.float64)
            check(np.array_equal(y.to_local(), exp), f"{shape} {s}: distribute from rank 0")
    # every dtype NumPy has (bf16 as uint16)
    for dtype in (np.float32, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_):
        full = random_full((5, 3), 9).astype(dtype)
        x = dt.distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        check(x.dtype == np.dtype(dtype) and np.array_equal(x.full_tensor(), full), f"dtype {dtype}")
    bits = np.arange(15, dtype=np.uint16).reshape(5, 3) + 16256
    x = dt.distribute_tensor(bits, mesh, [Shard(0), Replicate()], dtype="bfloat16")
    check(x.dtype_name == "bfloat16" and np.array_equal(x.full_tensor(), bits), "bfloat16 as uint16")


def partial_parts(full, k, seed):
    """k contributions whose sum is full."""
    rng = np.random.default_rng(seed)
    parts = [rng.integers(-9, 9, size=full.shape).astype(full.dtype) for _ in range(k - 1)]
    parts.append(full - sum(parts) if parts else full.copy())
    return parts


def case_redistribute():
    mesh = mesh_2d()
    for si, shape in enumerate(SHAPES[:3]):
        full = random_full(shape, 10 + si)
        for s in SPECS_2D:
            x = dt.distribute_tensor(full, mesh, spec_list(s))
            for t in SPECS_2D:
                spec = spec_list(t)
                y = x.redistribute(spec)
                check(np.array_equal(y.to_local(), expected_local(full, mesh, spec)), f"{shape} {s} -> {t}")
                w = x.redistribute_async(t)
                z = w.wait()
                check(np.array_equal(z.to_local(), expected_local(full, mesh, spec)), f"{shape} {s} -> {t} async")
                check(w.test(), "work done after wait")
    # Partial: sum and max over a 1-d mesh of every rank
    mesh1 = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    full = random_full((7, 3), 20)
    parts = partial_parts(full, SIZE, 21)
    p = dt.DTensor.from_local(parts[RANK], mesh1, [Partial("sum")], shape=full.shape, copy=True)
    check(p.placements == (Partial("sum"),), f"placements {p.placements}")
    check(np.array_equal(p.full_tensor(), full), "P(sum) -> R")
    q = p.redistribute([Shard(0)])
    check(np.array_equal(q.to_local(), expected_local(full, mesh1, [Shard(0)])), "P(sum) -> S(0)")
    pm = dt.DTensor.from_local(full - RANK, mesh1, [Partial("max")], shape=full.shape, copy=True)
    check(np.array_equal(pm.redistribute([Replicate()]).to_local(), full), "P(max) -> R")
    r = dt.distribute_tensor(full, mesh1, [Replicate()]).redistribute([Partial("sum")])
    check(np.array_equal(r.full_tensor(), full), "R -> P(sum) -> R")
    check(np.array_equal(r.to_local(), full if RANK == 0 else np.zeros_like(full)), "R -> P(sum) keeps the value on 0")


def case_ops():
    mesh = mesh_2d()
    a = random_full((6, 5), 30)
    b = random_full((6, 5), 31)
    w = random_full((5, 4), 32)
    x = dt.distribute_tensor(a, mesh, [Shard(0), Replicate()])
    y = dt.distribute_tensor(b, mesh, [Shard(0), Shard(1)])
    check(np.array_equal(dt.ops.add(x, y).full_tensor(), a + b), "add")
    check(np.array_equal((x * y).full_tensor(), a * b), "mul")
    m = dt.ops.matmul(x, dt.distribute_tensor(w, mesh, [Replicate(), Shard(1)]))
    check(np.allclose(m.full_tensor(), a @ w), "matmul")
    check(np.array_equal(dt.ops.sum(y, dims=[1]).full_tensor(), b.sum(1)), "sum(dims=[1])")
    check(np.array_equal(dt.ops.sum(y, dims=[0], keepdim=True).full_tensor(), b.sum(0, keepdims=True)), "sum keepdim")
    check(np.array_equal(dt.op("relu", y).full_tensor(), np.maximum(b, 0)), "op('relu')")
    check(np.array_equal(dt.op("mul_scalar", x, scalar=2.5).full_tensor(), a * 2.5), "op(mul_scalar, scalar=2.5)")
    check("matmul" in dt.ops_list(), "ops_list")


def case_comm_debug():
    """CommDebugMode from Python: the collectives of a redistribution under nested scopes, against the planner's plan
    for it (plan_describe's all-gathers); a call outside every scope under Global only; bad exits named."""
    mesh = mesh_2d()
    a = random_full((8, 6), 40)
    x = dt.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
    sizes = (2 if SIZE >= 4 else 1, SIZE // (2 if SIZE >= 4 else 1))
    plan = dt.plan_describe((8, 6), sizes, "S(0),S(1)", "R,R", np.float64)
    # A step over a group of one issues nothing (the collective is the identity).
    gathers = sum(int(g) > 1 for g in re.findall(r"all_gather \S+ -> \S+ \(group (\d+)", plan))
    with dt.CommDebugMode() as mode:
        mode.declare("model", 1)
        mode.declare("model.gather", 2)
        with mode.scope("model"):
            with mode.scope("model.gather"):
                y = x.redistribute([Replicate(), Replicate()])
        check(np.array_equal(y.full_tensor(), a), "the gathered tensor")  # outside: y is already whole
    counts = mode.counts()
    check(mode.counts("model.gather").get("all_gather", 0) == gathers,
          f"model.gather: {mode.counts('model.gather')} all-gathers, the plan has {gathers}: {plan!r}")
    check(mode.counts("model") == mode.counts("model.gather"), "a scope holds its children's calls")
    check(counts.get("all_gather", 0) >= gathers, f"Global holds them too: {counts}")
    j = mode.json()
    check([s["name"] for s in j["scopes"]][:3] == ["Global", "model", "model.gather"], "the table's order")
    check("model.gather" in mode.table() if gathers else mode.table() == "no collectives\n",
          f"the text table: {mode.table()!r}")
    try:
        mode.exit("model")
        check(False, "exiting an inactive scope is refused")
    except dt.InvalidArgumentError as e:
        check("model" in str(e), f"the error names the scope: {e}")
    mode.close()


def case_zero_copy():
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    kept_before = len(dt.tensor._kept)
    local = np.arange(12, dtype=np.float32).reshape(3, 4) + 100 * RANK
    x = dt.DTensor.from_local(local, mesh, [Shard(0)], shape=(3 * SIZE, 4))
    check(x.local_data_ptr == local.__array_interface__["data"][0], "from_local(copy=False) uses the array in place")
    local[0, 0] = -1.0
    check(x.to_local()[0, 0] == -1.0, "a write to the array is seen by the tensor")
    view = x.to_local()
    check(view.__array_interface__["data"][0] == x.local_data_ptr, "to_local() is a view (same address)")
    view[1, 1] = -2.0
    check(local[1, 1] == -2.0, "a write through to_local() reaches the array")
    full = x.full_tensor()
    check(np.array_equal(full[3 * RANK:3 * RANK + 3], local), "full_tensor of a zero-copy tensor")
    # The array is kept alive by the tensor, and released when the tensor goes.
    del local, view
    gc.collect()
    check(np.array_equal(x.to_local()[2], np.arange(8, 12, dtype=np.float32) + 100 * RANK), "array kept alive")
    check(len(dt.tensor._kept) == kept_before + 1, "one array kept")
    x.close()
    gc.collect()
    check(len(dt.tensor._kept) == kept_before, "the release callback dropped the array")
    # to_local outlives its tensor.
    y = dt.distribute_tensor(np.arange(8.0 * SIZE).reshape(SIZE * 2, 4), mesh, [Shard(0)])
    v = y.to_local()
    y.close()
    del y
    gc.collect()
    check(np.array_equal(v, np.arange(8.0 * SIZE).reshape(SIZE * 2, 4)[2 * RANK:2 * RANK + 2]), "to_local keeps alive")
    # copy=True copies
    a = np.ones((2, 2), np.float32)
    c = dt.DTensor.from_local(a, mesh, [Replicate()], shape=(2, 2), copy=True)
    check(c.local_data_ptr != a.__array_interface__["data"][0], "copy=True copies")
    check(np.array_equal(c.to_local(copy=True), a), "to_local(copy=True)")


def case_dlpack():
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    full = random_full((SIZE * 2 + 1, 3), 40)
    x = dt.distribute_tensor(full, mesh, [Shard(0)])
    check(x.__dlpack_device__() == (1, 0), "kDLCPU")
    if x.local_shape[0]:
        v = np.from_dlpack(x)
        check(v.__array_interface__["data"][0] == x.local_data_ptr, "numpy.from_dlpack is zero copy")
        check(np.array_equal(v, expected_local(full, mesh, [Shard(0)])), "numpy.from_dlpack values")
    arr = np.ascontiguousarray(expected_local(full, mesh, [Shard(0)]))
    y = dt.from_dlpack(arr, mesh, [Shard(0)], shape=full.shape)
    if arr.size:
        check(y.local_data_ptr == arr.__array_interface__["data"][0], "dtensor.from_dlpack(numpy) is zero copy")
    check(np.array_equal(y.full_tensor(), full), "dlpack round trip")
    cap = x.__dlpack__(max_version=(1, 0))
    del cap  # never consumed: the capsule's destructor calls the deleter
    legacy = x.__dlpack__()
    del legacy
    gc.collect()


def case_ckpt_save(path):
    mesh = mesh_2d()
    a = random_full((7, 5), 50)
    b = random_full((4,), 51).astype(np.float32)
    x = dt.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
    y = dt.distribute_tensor(b, mesh, [Replicate(), Shard(0)])
    dt.save_checkpoint(path, {"a": x, "b": y}, metadata={"step": 7, "tag": "py"})
    w = dt.save_checkpoint(path + "-async", {"a": x}, async_save=True)
    check(w.wait() is None, "async save")


def case_ckpt_load(path):
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    a = random_full((7, 5), 50)
    b = random_full((4,), 51).astype(np.float32)
    x = dt.distribute_tensor(np.zeros_like(a), mesh, [Shard(1)])
    y = dt.distribute_tensor(np.zeros_like(b), mesh, [Shard(0)])
    meta = dt.load_checkpoint(path, {"a": x, "b": y})
    check(meta.get("step") == 7 and meta.get("tag") == "py", f"metadata {meta}")
    check(np.array_equal(x.full_tensor(), a) and np.array_equal(y.full_tensor(), b), "loaded values")
    z = dt.distribute_tensor(np.zeros_like(a), mesh, [Replicate()])
    dt.load_checkpoint(path + "-async", {"a": z})
    check(np.array_equal(z.to_local(), a), "async-saved values")
    try:
        dt.load_checkpoint(path, {"nope": z})
        check(False, "a missing name must fail")
    except dt.InvalidArgumentError as e:
        check("nope" in str(e), f"missing name message: {e}")


def case_fsdp():
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("dp",))
    w = random_full((5, 3), 60).astype(np.float32)  # 5 rows: uneven and empty shards on 4 ranks
    bias = random_full((2,), 61).astype(np.float32)
    params = [dt.distribute_tensor(w, mesh, [Replicate()]), dt.distribute_tensor(bias, mesh, [Replicate()])]
    g = dt.FsdpParamGroup(mesh, params, names=["w", "b"], name="layer")
    s = g.sharded_param(0)
    check(s.placements == (Shard(0),), f"sharded placements {s.placements}")
    check(np.array_equal(s.to_local(), expected_local(w, mesh, [Shard(0)])), "the shard")
    for step in range(2):
        g.unshard()
        g.wait_unshard()
        full = g.unsharded_param(0)
        check(np.array_equal(full.to_local(), w), f"step {step}: the gathered parameter equals the full one")
        g.reshard(post_forward=True)
        g.unshard(async_op=False)
        gw = w * (RANK + 1) + step
        gb = bias * (RANK + 1)
        g.accumulate_grad(0, dt.DTensor.from_local(gw, mesh, [Replicate()], shape=w.shape))
        g.accumulate_grad(1, dt.DTensor.from_local(gb, mesh, [Replicate()], shape=bias.shape))
        g.reduce_grads()
        g.wait_reduce()
        mean_w = sum(w * (r + 1) + step for r in range(SIZE)) / SIZE
        rg = g.sharded_grad(0)
        check(np.allclose(rg.to_local(), expected_local(mean_w, mesh, [Shard(0)])), f"step {step}: reduced grad")
        check(np.allclose(g.sharded_grad(1).full_tensor(), sum(bias * (r + 1) for r in range(SIZE)) / SIZE),
              "bias grad")
        g.reshard()
        # The optimizer's update, in place on the shard: the next gather sees it.
        s.to_local()[...] -= 1.0
        w = w - 1.0
    mem = g.memory()
    check(mem["sharded_bytes"] > 0 or expected_local(w, mesh, [Shard(0)]).size == 0, f"memory {mem}")
    g.close()


def case_errors():
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    a = np.zeros((4, 3), np.float32)
    try:
        dt.DTensor.from_local(a, mesh, [Shard(0)], shape=(4 * SIZE + 5, 3), run_check=True)
        check(False, "a wrong local shape must fail")
    except dt.InvalidArgumentError as e:
        check(e.status == 1 and "shape" in e.message, f"wrong shape message: {e}")
        check(isinstance(e, ValueError), "InvalidArgumentError is a ValueError")
    try:
        dt.distribute_tensor(a, mesh, [Shard(2)])
        check(False, "Shard(2) of a 2-d tensor must fail")
    except dt.InvalidArgumentError as e:
        check("Shard(2)" in str(e), f"message names the placement: {e}")
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    raw = x.handle
    x.close()
    x.close()  # idempotent
    try:
        dt.DTensor(raw).shape
        check(False, "a destroyed handle must fail")
    except dt.InvalidHandleError as e:
        check(e.status == 8 and e.status_name == "DT_ERR_INVALID_HANDLE", f"destroyed handle: {e}")
    try:
        dt.DTensor(mesh.handle).shape
        check(False, "a mesh handle used as a tensor must fail")
    except dt.InvalidHandleError as e:
        check(e.status == 8, f"wrong kind: {e}")
    try:
        dt.op("no_such_op", dt.distribute_tensor(a, mesh, [Replicate()]))
        check(False, "an unknown op must fail")
    except dt.InvalidArgumentError as e:
        check("no_such_op" in str(e), f"unknown op: {e}")
    try:
        dt.parse_placements("S(")
        check(False, "bad text must fail")
    except dt.Error as e:
        check(e.status == 1, f"parse: {e}")
    # A host's NCCL communicator and streams: what is checked without a GPU (nccl_adopt_test.cc runs on one).
    check(dt.current_stream("cpu") is None, "the CPU has no current stream")
    dt.set_stream("cpu", None)
    for bad, kind, needle in ((lambda: dt.set_stream("cpu", 4096), dt.InvalidArgumentError, "has no streams"),
                              (lambda: dt.set_stream("cpu", "s"), TypeError, "cudaStream_t"),
                              (lambda: dt.set_stream("tpu", None), ValueError, "'cpu' or 'cuda[:i]'"),
                              (lambda: dt.from_nccl(None), dt.InvalidArgumentError, "nccl_comm is NULL"),
                              (lambda: dt.from_nccl(4096, timeout=float("inf")), dt.InvalidArgumentError,
                               "timeout_s is inf")):
        try:
            bad()
            check(False, f"must fail with {kind.__name__}: {needle}")
        except kind as e:
            check(needle in str(e), f"{kind.__name__} names what is wrong: {e}")


def ctypes_redistribute(x, placements):
    """The same redistribution through ctypes alone (the package's other path), as a plain DTensor."""
    spec, n = dt.tensor._spec(placements)
    h = ctypes.c_void_p()
    dt._lib.lib.dt_tensor_redistribute(x.handle, spec, n, ctypes.byref(h))
    return dt.DTensor(h.value)


def handle_is_live(raw):
    """Whether the C API still knows a tensor handle (asked through ctypes, past any DTensor object)."""
    try:
        dt._lib.get_i32(dt._lib.lib.dt_tensor_ndim, raw)
        return True
    except dt.InvalidHandleError:
        return False


def case_fast_paths():
    """DTensor's compiled base (_speedups.TensorBase) and the ctypes path (Handle) give the same values, errors and
    handle lifetimes; the run checks that it is on the path its environment asks for."""
    import copy
    import os
    import pickle
    from dtensor._handle import Handle
    compiled = bool(os.environ.get("DTENSOR_SPEEDUPS")) and not os.environ.get("DTENSOR_NO_SPEEDUPS")
    speedups = dt._lib.speedups
    check((speedups is not None) == compiled, f"compiled fast paths loaded: {speedups is not None}, "
          f"expected {compiled}")
    check(issubclass(dt.DTensor, speedups.TensorBase if compiled else Handle), f"DTensor bases {dt.DTensor.__mro__}")
    # Placements: interned values with their public behaviour.
    check(Shard(0) is Shard(0, -1) and Shard(0) == Shard(0) and Shard(0) != Shard(1) and Shard(0) != Replicate(),
          "placement equality")
    check(hash(Partial("max")) == hash(Partial(reduce_op="max")) and Partial() == Partial("sum"), "placement hash")
    check(repr(Shard(1)) == "Shard(dim=1, order=-1)" and repr(Replicate()) == "Replicate()" and
          repr(Partial("avg")) == "Partial(reduce_op='avg')" and Shard(2, 1).dim == 2, "placement repr and fields")
    check(pickle.loads(pickle.dumps(Shard(1, 0))) is Shard(1, 0) and copy.deepcopy([Partial("min")])[0] is
          Partial("min"), "a copied placement is the interned one")
    try:
        Shard(0).dim = 1
        check(False, "placements are frozen")
    except AttributeError:
        pass
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    specs = [[Shard(0)], (Shard(1),), "S(0)", Replicate(), [Shard(1)], "R"]  # every kind of cache key, twice over
    for si, shape in enumerate([(6, 4), (5, 3), (1, 2)]):  # even, uneven, empty blocks
        full = random_full(shape, 70 + si).astype(np.float32)
        for src in ([Replicate()], [Shard(0)], [Shard(1)]):
            x = dt.distribute_tensor(full, mesh, src)
            for _ in range(2):
                for s in specs:
                    exp = expected_local(full, mesh, spec_list(s) if not isinstance(s, dt.Placement) else [s])
                    y, z = x.redistribute(s), ctypes_redistribute(x, s)
                    check(type(y) is dt.DTensor and np.array_equal(y.to_local(), exp) and
                          np.array_equal(z.to_local(), exp), f"{shape} {src} -> {s}")
                    y.close()
                    z.close()
    x = dt.distribute_tensor(np.zeros((4, 3), np.float32), mesh, [Replicate()])
    # Errors: the same exception, status and message on both paths.
    for bad, kind in (([Shard(2)], dt.InvalidArgumentError), ("S(", dt.InvalidArgumentError), ([1], TypeError),
                      ([[Shard(0)]], TypeError), (3, TypeError)):
        got = []
        for f in (x.redistribute, lambda p: ctypes_redistribute(x, p)):
            try:
                f(bad)
                got.append(None)
            except Exception as e:  # noqa: BLE001 - compared below
                got.append((type(e), str(e), getattr(e, "status", None)))
        check(got[0] is not None and got[0][0] is kind and got[0] == got[1], f"error for {bad!r}: {got}")
    try:
        x.redistribute([Shard(2)])
        check(False, "Shard(2) of a 2-d tensor must fail")
    except dt.InvalidArgumentError as e:
        check(e.status == 1 and e.function == "dt_tensor_redistribute" and "Shard(2)" in e.message, f"error: {e}")
    # close(): idempotent; afterwards every use raises InvalidHandleError.
    y = x.redistribute([Shard(0)])
    raw = y.handle
    check(isinstance(raw, int) and y._h == raw and handle_is_live(raw), "a live handle")
    y.close()
    y.close()
    check(y.handle is None and not handle_is_live(raw) and repr(y) == "DTensor(closed)", "closed")
    for use in (lambda: y.redistribute([Replicate()]), lambda: y.shape, lambda: y.to_local()):
        try:
            use()
            check(False, "use after close must fail")
        except dt.InvalidHandleError as e:
            check(e.status == 8, f"use after close: {e}")
    # with: closes at the end of the block, also when it raises (and never swallows the exception).
    with x.redistribute([Shard(0)]) as y:
        raw = y.handle
        check(handle_is_live(raw), "live inside with")
    check(y.handle is None and not handle_is_live(raw), "with closes")
    try:
        with x.redistribute([Shard(0)]) as y:
            raw = y.handle
            raise KeyError("inside")
    except KeyError:
        check(not handle_is_live(raw), "with closes when the block raises")
    # Collected: the handle is released, also from a reference cycle (the GC).
    y = x.redistribute([Shard(0)])
    raw = y.handle
    del y
    check(not handle_is_live(raw), "a dropped DTensor releases its handle")
    gc.disable()
    try:
        y = x.redistribute([Shard(0)])
        y.me = y  # a cycle: only the GC frees it
        raw = y.handle
        del y
        check(handle_is_live(raw), "alive while in a cycle")
        gc.collect()
        check(not handle_is_live(raw), "a DTensor collected by the GC releases its handle")
    finally:
        gc.enable()
    # The result is of the caller's type, made without its __init__.
    class Tagged(dt.DTensor):
        def __init__(self, handle):
            raise AssertionError("not called by redistribute")
    t = dt.distribute_tensor(np.ones((2, 2), np.float32), mesh, [Replicate()])
    t.__class__ = Tagged
    u = t.redistribute([Shard(0)])
    check(type(u) is Tagged and np.array_equal(u.to_local(), expected_local(np.ones((2, 2)), mesh, [Shard(0)])),
          f"result type {type(u).__name__}")
    # The spec cache stays bounded: 300 distinct keys (the same spec in text with more and more spaces).
    for i in range(300):
        x.redistribute(" " * i + "S(0)").close()
    if compiled:
        check(0 < speedups.spec_cache_size() <= 256, f"spec cache size {speedups.spec_cache_size()}")
    check(dt.tensor._convert_cached.cache_info().currsize <= 256, "the ctypes path's cache is bounded")


def case_torch():
    import torch
    mesh = dt.DeviceMesh(world, "cpu", (SIZE,), ("x",))
    full = torch.arange(SIZE * 6, dtype=torch.float32).reshape(SIZE * 2, 3)
    x = dt.distribute_tensor(full.numpy(), mesh, [Shard(0)])
    t = torch.from_dlpack(x)
    check(t.data_ptr() == x.local_data_ptr, "torch.from_dlpack(DTensor) is zero copy")
    check(torch.equal(t, full[2 * RANK:2 * RANK + 2]), "torch view values")
    local = torch.randn(3, 4, generator=torch.Generator().manual_seed(RANK))
    y = dt.from_dlpack(local, mesh, [Shard(0)], shape=(3 * SIZE, 4))
    check(y.local_data_ptr == local.data_ptr(), "dtensor.from_dlpack(torch) is zero copy")
    z = dt.DTensor.from_local(local, mesh, [Shard(0)], shape=(3 * SIZE, 4))
    check(z.local_data_ptr == local.data_ptr(), "DTensor.from_local(torch) goes through DLPack")
    check(np.array_equal(y.full_tensor()[3 * RANK:3 * RANK + 3], local.numpy()), "full_tensor of a torch block")
    bf = full.to(torch.bfloat16)
    b = dt.from_dlpack(bf, mesh, [Replicate()], shape=tuple(bf.shape), copy=True)
    check(b.dtype_name == "bfloat16", "bf16 through DLPack")
    back = torch.from_dlpack(b.redistribute([Shard(0)]))
    check(back.dtype == torch.bfloat16 and torch.equal(back, bf[2 * RANK:2 * RANK + 2]), "bf16 round trip")
    p = torch.nn.Parameter(torch.ones(2, 2))
    check(dt.from_dlpack(p, mesh, [Replicate()], shape=(2, 2)).local_data_ptr == p.data_ptr(),
          "a parameter (requires_grad) is detached, not copied")


def case_explicit_init(rank, size, port):
    """Run without a launcher: the world comes from dt.init(rank=..., world_size=..., store_port=..., secret=...)."""
    check(world.rank == int(rank) and world.size == int(size), f"explicit world {world}")
    case_redistribute()


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}

if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    if name == "explicit_init":
        world = dt.init(rank=int(args[0]), world_size=int(args[1]), store_port=int(args[2]), secret="explicit-test")
    else:
        world = dt.init_process_group()
    RANK, SIZE = world.rank, world.size
    CASES[name](*args)
    world.barrier()
    if failures:
        print(f"[r{RANK}] {len(failures)} check(s) failed in {name}", flush=True)
        sys.exit(1)
    print(f"[r{RANK}] {name}: ok", flush=True)
