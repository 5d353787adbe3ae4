#!/usr/bin/env python3
"""Per-call cost of DTensor.redistribute from Python against the same loop in C, side by side in one process.

    dtrun --nproc-per-node 2 python3 examples/python/call_overhead.py [--calls 2000] [--rounds 9]

Times `x.redistribute(dst).close()` in a Python loop on a tiny float32 tensor (4 x 4): R -> S(0) (a local slice, no
communication: mostly call overhead) and S(0) -> R (a small all-gather), and the same calls made by C
(dt_tensor_redistribute + dt_tensor_destroy, on the same tensor: _speedups.bench_loop), in alternating rounds (which
side goes first alternates too). Prints microseconds per call, best and median of the rounds, in wall time and in
this thread's CPU time (which a loaded machine disturbs less: descheduled time is not counted), the time Python adds
over C, and one JSON line per case and clock (medians, and the best of the rounds):
    {"bench":"python_call_overhead","case":..,"ranks":..,"path":..,"clock":..,"python_us":..,"c_us":..,
     "added_us":..,"python_best_us":..,"c_best_us":..,"added_best_us":..}
`path` is "speedups" (the compiled DTensor base) or "ctypes" (DTENSOR_NO_SPEEDUPS=1). bench/c_api_overhead 4 4
measures C against C++ the same way; Python against C++ is the sum of the two added figures
(bench/python_overhead.py runs all three and adds them up).
The C baseline needs the compiled module (built by pip, or named by $DTENSOR_SPEEDUPS); without it only Python runs.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's BLAS threads would spin on the cores the ranks share
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
import dtensor as dt  # noqa: E402
from dtensor import _lib  # noqa: E402
from dtensor.tensor import _spec_bytes  # noqa: E402

CLOCKS = (("wall", time.perf_counter), ("cpu", time.thread_time))


def time_rounds(world, sides, calls, rounds):
    """{side: {clock: [us per call, one per round]}}: the sides alternate within a round, and which goes first
    alternates between rounds."""
    out = {name: {c: [] for c, _ in CLOCKS} for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            world.barrier()
            w0, c0 = time.perf_counter(), time.thread_time()
            sides[name](calls)
            w1, c1 = time.perf_counter(), time.thread_time()
            out[name]["wall"].append((w1 - w0) / calls * 1e6)
            out[name]["cpu"].append((c1 - c0) / calls * 1e6)
    return out


def best_median(values):
    v = sorted(values)
    return v[0], v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    world = dt.init_process_group()
    mesh = dt.DeviceMesh(world, "cpu", (world.size,), ("x",))
    full = np.arange(16, dtype=np.float32).reshape(4, 4)
    path = "speedups" if _lib.speedups is not None else "ctypes"
    c_side = _lib.speedups or _lib.load_speedups(always=True)  # the C loop, also when the package runs on ctypes
    rows = []
    for label, src, dst in (("R->S(0) local slice", [dt.Replicate()], [dt.Shard(0)]),
                            ("S(0)->R all-gather", [dt.Shard(0)], [dt.Replicate()])):
        x = dt.distribute_tensor(full, mesh, src)
        raw, n = _spec_bytes(dst)

        def python_loop(calls):
            for _ in range(calls):
                x.redistribute(dst).close()

        def c_loop(calls):
            c_side.bench_loop(x.handle, raw, n, calls)

        sides = {"python": python_loop}
        if c_side is not None:
            sides["c"] = c_loop
        for side in sides.values():  # warm: plans cached, buffers pooled
            side(200)
        times = time_rounds(world, sides, args.calls, args.rounds)
        for clock, _ in CLOCKS:
            py = best_median(times["python"][clock])
            c = best_median(times["c"][clock]) if "c" in times else (float("nan"), float("nan"))
            rows.append((label, clock, py, c))
        x.close()
    if world.rank == 0:
        print(f"DTensor.redistribute(...).close() from Python ({path}) against C in the same process, "
              f"{world.size} processes, 4x4 float32, {args.calls} calls x {args.rounds} rounds; us per call, "
              f"best / median")
        print(f"{'case':22s} {'clock':5s} {'Python us':>15s} {'C us':>15s} {'added us':>15s}")
        for label, clock, py, c in rows:
            added = (py[0] - c[0], py[1] - c[1])
            print(f"{label:22s} {clock:5s} {py[0]:7.2f} /{py[1]:6.2f} {c[0]:7.2f} /{c[1]:6.2f} "
                  f"{added[0]:7.2f} /{added[1]:6.2f}")
        for label, clock, py, c in rows:
            row = {"bench": "python_call_overhead", "case": label, "ranks": world.size, "path": path, "clock": clock,
                   "python_us": py[1], "c_us": c[1], "added_us": py[1] - c[1], "python_best_us": py[0],
                   "c_best_us": c[0], "added_best_us": py[0] - c[0]}
            # NaN (no C side) is not JSON: null
            print(json.dumps({k: (round(v, 3) if v == v else None) if isinstance(v, float) else v
                              for k, v in row.items()}))
        if c_side is None:
            print("note: no C baseline (the compiled _speedups module is not built: pip builds it, or set "
                  "DTENSOR_SPEEDUPS)")


if __name__ == "__main__":
    main()
