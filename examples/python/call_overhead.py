#!/usr/bin/env python3
"""Per-call cost of DTensor.redistribute from Python (the overhead the ctypes layer adds over the C call).

    dtrun --nproc-per-node 2 python3 examples/python/call_overhead.py [--calls 2000] [--repeats 7]

Times a loop of redistribute calls on a tiny float32 tensor (4 x 4): R -> S(0) (a local slice, no communication:
mostly call overhead) and S(0) -> R (an all-gather). Prints microseconds per call (best and median of the repeats),
in wall time and in this thread's CPU time (which a loaded machine disturbs less: descheduled time is not counted),
and one JSON line. The same loops in C (dt_tensor_redistribute + dt_tensor_destroy) give the baseline.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
import dtensor as dt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    world = dt.init_process_group()
    mesh = dt.DeviceMesh(world, "cpu", (world.size,), ("x",))
    full = np.arange(16, dtype=np.float32).reshape(4, 4)
    rows = {}
    for label, src, dst in (("R->S(0)", [dt.Replicate()], [dt.Shard(0)]), ("S(0)->R", [dt.Shard(0)], [dt.Replicate()])):
        x = dt.distribute_tensor(full, mesh, src)
        for _ in range(100):
            x.redistribute(dst).close()
        for clock_name, clock in (("wall", time.perf_counter), ("cpu", time.thread_time)):
            times = []
            for _ in range(args.repeats):
                world.barrier()
                t0 = clock()
                for _ in range(args.calls):
                    x.redistribute(dst).close()
                times.append((clock() - t0) / args.calls * 1e6)
            times.sort()
            rows[f"{label} {clock_name}"] = (times[0], times[len(times) // 2])
    if world.rank == 0:
        print(f"redistribute from Python, {world.size} processes, 4x4 float32, {args.calls} calls x {args.repeats}")
        for label, (best, med) in rows.items():
            print(f"  {label:12s} best {best:7.2f} us/call  median {med:7.2f} us/call")
        print(json.dumps({"bench": "python_call_overhead", "nproc": world.size,
                          **{k: {"best_us": round(b, 3), "median_us": round(m, 3)} for k, (b, m) in rows.items()}}))


if __name__ == "__main__":
    main()
