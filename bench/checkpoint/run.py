#!/usr/bin/python3
"""bench/checkpoint: dtensor's sharded checkpoints against this machine's plain file writes and reads and against
torch.distributed.checkpoint (DCP), on the same state, in the same run.

Usage: run.py BUILD_DIR [--torch-only] [--rounds N] [--steps N] [--warmup N] [--cases mlp,synthetic,mlp-4]
              [--mb 256] [-- ARGS...]

Cases (dtensor: bench/ckpt_bench under dtrun; PyTorch: bench/checkpoint/torch_dcp.py under torchrun on gloo):
  mlp        issue #16's MLP (4 blocks, 512 -> 2048 -> 512, biases) and its AdamW moments, f32, Shard(0) over
             2 ranks: 48 MiB per rank.                                                            judged
  synthetic  --mb N MiB per rank (default 256) in 16 tensors, 2 ranks.                            judged
  mlp-4      the MLP on 4 ranks (on a 2-core machine the ranks share cores).                      reported
Each program run does --steps rounds of its modes (save, save_async, load, load_reshard; ckpt_bench also raw_write
and raw_read of the same bytes per rank), the first --warmup not counted, and prints per op the median over its
rounds (a round's time: the maximum over ranks). run.py runs the two programs in alternating rounds (which goes first
alternates: shared machines drift); a row is the median over rounds.

Targets (2 ranks): save >= 0.70 of raw_write's throughput and load >= 0.70 of raw_read's, measured in the same run
(the ratio of each run, median over runs); save and load <= 0.5x DCP's time. Reads come from the page cache on both
sides (the files were just written; dropping the cache needs root) and writes include fsync on both sides.

Prints the table on stderr and one JSON line per row on stdout:
  {"bench":"checkpoint","case":..,"impl":"dtensor","op":..,"ranks":..,"bytes_per_rank":..,"time_s":..,
   "gbs_per_rank":..,"raw_op":..,"raw_gbs_per_rank":..,"ratio_to_raw":..,"raw_target":..,"torch_time_s":..,
   "ratio_to_torch":..,"torch_target":..,"rounds":..}
Exits 1 when a run failed.

Environment: DT_BENCH_CKPT_ROUNDS (3), DT_BENCH_CKPT_STEPS (4: rounds inside each run), DT_BENCH_CKPT_WARMUP (1),
DT_BENCH_CKPT_CASES, DT_BENCH_CKPT_MB (256), DT_BENCH_CKPT_ARGS (arguments for both programs, e.g. "--dir /data"
for the folder the checkpoints go to), DT_BENCH_CKPT_TORCH_ONLY=1, DT_BENCH_VENV (the PyTorch venv; default
BUILD_DIR/py-venv).
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import fmt, log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "torch_dcp.py")
CASES = ("mlp", "synthetic", "mlp-4")
JUDGED = ("mlp", "synthetic")
RAW_TARGET = 0.70  # dtensor's GB/s / the raw file's, same run
TORCH_TARGET = 0.5  # dtensor's time / DCP's
# op -> (the raw reference it is compared with, whether the comparisons are judged)
OPS = {"save": ("raw_write", True), "save_async_call": (None, False), "save_async": ("raw_write", False),
       "load": ("raw_read", True), "load_reshard": ("raw_read", False)}


def main():
    ap = benchlib.driver_parser("dtensor's sharded checkpoints against raw file I/O and PyTorch DCP", "DT_BENCH_CKPT",
                                4, CASES)
    ap.set_defaults(warmup=int(os.environ.get("DT_BENCH_CKPT_WARMUP", "1")))
    ap.add_argument("--mb", type=int, default=int(os.environ.get("DT_BENCH_CKPT_MB", "256")),
                    help="MiB per rank of the synthetic case (default 256)")
    a = benchlib.parse_driver_args(ap, sys.argv[1:])
    if a.mb < 1:
        ap.error(f"--mb must be at least 1, got {a.mb}")
    ckpt_bench = os.path.join(a.build, "bench", "ckpt_bench")
    dtrun = os.path.join(a.build, "tools", "dtrun")
    torch_only = a.torch_only or not benchlib.programs_built(a.build, ["bench/ckpt_bench"], "bench/checkpoint")
    python = benchlib.ensure_venv(benchlib.venv_dir(a.build), "bench/checkpoint")

    common = ["--rounds", str(a.steps), "--warmup", str(a.warmup)] + a.model_args
    plans, ranks_of = [], {}
    for c in a.cases:
        ranks = 4 if c == "mlp-4" else 2
        args = common + (["--mb", str(a.mb)] if c == "synthetic" else [])
        ranks_of[c] = ranks
        sides = [("torch-dcp", lambda r=ranks, x=args: benchlib.torchrun(python, r) + [python, TWIN] + x)]
        if not torch_only:
            sides.insert(0, ("dtensor", lambda r=ranks, x=args: [dtrun, "--nproc-per-node", str(r), ckpt_bench] + x))
        plans.append((c, sides))

    start = time.monotonic()
    results, failed = benchlib.run_rounds(plans, a.rounds, "bench/checkpoint")
    log(f"== bench/checkpoint: {time.monotonic() - start:.0f} s")

    def per_run(case, impl):
        """[{op: row}] per successful run."""
        return [{r["op"]: r for r in rows if r.get("bench") == "checkpoint" and "op" in r}
                for _, rows in results.get((case, impl), [])]

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    headers = ["case", "op", "MiB/rank", "dtensor s", "GB/s/rank", "raw GB/s", "vs raw", "target", "torch s",
               "dt/torch", "target"]
    table, met, total, missed = [], 0, 0, []
    for case, _ in plans:
        d_runs, t_runs = per_run(case, "dtensor"), per_run(case, "torch-dcp")
        judged_case = case in JUDGED
        for op, (raw_op, judged_op) in list(OPS.items()) + [("raw_write", (None, False)), ("raw_read", (None, False))]:
            d = [r[op] for r in d_runs if op in r]
            t = [r[op] for r in t_runs if op in r]
            if not d and not t:
                continue
            bytes_per_rank = (d or t)[0]["bytes_per_rank"]
            d_s = med(x["time_s"] for x in d)
            t_s = med(x["time_s"] for x in t)
            # (raw, op) of each run: the op's throughput as a share of the same run's raw file I/O.
            pairs = [(r[raw_op], r[op]) for r in d_runs if raw_op in r and op in r] if raw_op else []
            raw_gbs = med(x["gbs_per_rank"] for x, _ in pairs)
            vs_raw = med(x["time_s"] / y["time_s"] for x, y in pairs)
            vs_torch = d_s / t_s if d_s and t_s else None
            raw_target = RAW_TARGET if judged_case and judged_op else None
            torch_target = TORCH_TARGET if judged_case and judged_op else None
            for value, target, better, what in ((vs_raw, raw_target, "ge", "vs raw"),
                                                (vs_torch, torch_target, "le", "vs DCP")):
                if value is None or target is None:
                    continue
                total += 1
                ok = value >= target if better == "ge" else value <= target
                met += ok
                if not ok:
                    missed.append(f"{case} {op} {what}: {value:.2f} (target {'>=' if better == 'ge' else '<='} "
                                  f"{target:.2f})")
            table.append([case, op, fmt(bytes_per_rank / 2**20, ".1f"), fmt(d_s, ".4f"),
                          fmt(d_s and bytes_per_rank / d_s / 1e9, ".2f"), fmt(raw_gbs, ".2f"),
                          fmt(vs_raw, ".2f"), fmt(raw_target, ".2f") if raw_target else ("info" if vs_raw else None),
                          fmt(t_s, ".4f"), fmt(vs_torch, ".2f", "x"),
                          fmt(torch_target, ".2f", "x") if torch_target else ("info" if vs_torch else None)])
            row = {"bench": "checkpoint", "case": case, "impl": "dtensor" if d else "torch-dcp", "op": op,
                   "ranks": ranks_of[case], "bytes_per_rank": bytes_per_rank,
                   "time_s": None if d_s is None else round(d_s, 6),
                   "gbs_per_rank": None if not d_s else round(bytes_per_rank / d_s / 1e9, 4),
                   "raw_op": raw_op, "raw_gbs_per_rank": None if raw_gbs is None else round(raw_gbs, 4),
                   "ratio_to_raw": None if vs_raw is None else round(vs_raw, 4), "raw_target": raw_target,
                   "torch_time_s": None if t_s is None else round(t_s, 6),
                   "ratio_to_torch": None if vs_torch is None else round(vs_torch, 4), "torch_target": torch_target,
                   "rounds": len(d or t)}
            if op.startswith("load") and d and "bytes_read_per_rank" in d[0]:
                row["bytes_read_per_rank"] = d[0]["bytes_read_per_rank"]
            print(json.dumps(row), flush=True)

    log(f"\nbench/checkpoint: seconds per operation (median over runs of each run's median over {a.steps - a.warmup} "
        f"round(s)); GB/s per rank = bytes per rank / time; 'vs raw': the op's throughput / the same run's raw "
        "file write (save, save_async) or read (load, load_reshard: Shard(1) blocks need the pages of every rank's "
        "file); 'dt/torch': dtensor's time / DCP's. save_async_call: until save_async returns; save_async: until "
        "the save is complete. Reads from the page cache; writes include fsync.")
    return benchlib.report("bench/checkpoint", headers, table, met, total, failed, [f"  missed: {m}" for m in missed])


if __name__ == "__main__":
    sys.exit(main())
