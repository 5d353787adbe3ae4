#!/usr/bin/python3
"""bench/train: dtensor's GPT training step (examples/train_gpt) against its PyTorch twin (bench/train/torch_gpt.py).

Usage: run.py BUILD_DIR [--torch-only] [--rounds N] [--steps N] [--cases 1,tp2] [--no-sdpa] [-- MODEL_ARGS...]

Cases, each with the same model, batch, dtype (f32), arguments and thread count on both sides:
  1     one process, nproc threads: train_gpt against PyTorch eager.                target: dtensor/torch <= 1.0x
  tp2   tensor parallel over 2 processes, nproc/2 threads each: train_gpt under dtrun (--dp 1 --tp 2) against
        PyTorch's parallelize_module with the same plan on gloo (torchrun).          target: dtensor/torch <= 0.5x
Both sides run with --clip 0 (no gradient clipping). Each round runs, per case, both sides one after the other (which
goes first alternates from round to round: shared machines drift), then, for information, the twin with
F.scaled_dot_product_attention. A run's step time is the median of its step_s after the warm-up steps; a row reports
the median over rounds. Peak memory: every rank of both sides runs under bench/train/peak_rss.py, which records its
peak RSS (the maximum over rounds is reported); dtensor's own figure (its allocator's peak, rank 0) is shown beside.

The PyTorch side runs from a virtual environment, BUILD_DIR/py-venv, made the first time (pip install torch numpy
from PyPI: about 3 GB). MODEL_ARGS (after --, or DT_BENCH_TRAIN_ARGS) go to both programs, e.g. "--batch 16 --dim 256".

Environment: DT_BENCH_TRAIN_ROUNDS (3), DT_BENCH_TRAIN_STEPS (20), DT_BENCH_TRAIN_WARMUP (3), DT_BENCH_TRAIN_ARGS,
DT_BENCH_TRAIN_THREADS (the threads of the one-process case, halved per rank for tp2; default nproc),
DT_BENCH_TRAIN_TORCH_ONLY=1 (the same as --torch-only), DT_BENCH_VENV (the venv's folder; DT_BENCH_TRAIN_VENV too),
DT_BENCH_TRAIN_BIND=1 (pin each rank of the tp2 case, on both sides, to one core: local rank i on core i).
Prints the table on stderr and one JSON line per row on stdout; exits 1 when a run failed.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import RUN_TIMEOUT_S, log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "torch_gpt.py")
PEAK_RSS = os.path.join(HERE, "peak_rss.py")
TARGETS = {"1": 1.0, "tp2": 0.5}
NAMES = {"1": "1 process", "tp2": "tp=2, 2 processes"}


def summarize(rows, warmup):
    """Step time (median of step_s after warm-up), the program's own peak figure, params and losses of one run."""
    steps = benchlib.step_rows(rows)
    if not steps:
        return None
    summary = next((r for r in rows if "params" in r), {})
    return {"step_s": benchlib.median_step_s(steps, warmup), "own_peak": max(r.get("peak_bytes", 0) for r in steps),
            "params": summary.get("params"), "loss_first": steps[0].get("loss"), "loss_last": steps[-1].get("loss"),
            "steps": len(steps)}


def run_one(name, make_cmd, env, warmup, bind):
    """Runs make_cmd(wrap), where wrap is the peak_rss.py prefix to put before each rank's program."""
    out_dir = tempfile.mkdtemp(prefix="dt-bench-train-")
    try:
        cmd = make_cmd([sys.executable, PEAK_RSS] + (["--bind"] if bind else []) + [out_dir])
        out = benchlib.run(name, cmd, env)
        s = summarize(benchlib.parse_rows(out), warmup) if out is not None else None
        if s is None:
            if out is not None:
                log(f"   {name}: printed no step lines")
            return None
        ranks = []
        for f in glob.glob(os.path.join(out_dir, "rank*.json")):
            with open(f) as fh:
                ranks.append(json.load(fh))
        s["peaks"] = [r["peak_rss_bytes"] for r in sorted(ranks, key=lambda r: r["rank"])]
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    log(f"   {name}: {s['step_s'] * 1e3:.2f} ms/step (median of {max(s['steps'] - warmup, 1)} steps), loss "
        f"{s['loss_first']} -> {s['loss_last']}, peak RSS MiB {[round(b / 2**20) for b in s['peaks']]}, "
        f"{benchlib.run.last_s:.1f} s")
    return s


def main():
    ap = benchlib.driver_parser("dtensor's GPT training step against PyTorch", "DT_BENCH_TRAIN", 20, tuple(TARGETS))
    ap.add_argument("--no-sdpa", action="store_true", help="skip the informational SDPA runs of the twin")
    a = benchlib.parse_driver_args(ap, sys.argv[1:])
    build, cases, model_args, torch_only = a.build, a.cases, a.model_args, a.torch_only
    train_gpt = os.path.join(build, "examples", "train_gpt")
    dtrun = os.path.join(build, "tools", "dtrun")
    torch_only = torch_only or not benchlib.programs_built(build, ["examples/train_gpt"], "bench/train")
    python = benchlib.ensure_venv(benchlib.venv_dir(build), "bench/train")
    dtensor_params = None
    if not torch_only:
        # train_gpt's --json lines carry no parameter count; its text header does ("...; N parameters").
        p = subprocess.run([train_gpt, "--steps", "0"] + model_args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=RUN_TIMEOUT_S)
        m = re.search(r"(\d+) parameters", p.stdout)
        dtensor_params = int(m.group(1)) if m else None

    cores = int(os.environ.get("DT_BENCH_TRAIN_THREADS", "0")) or os.cpu_count() or 1
    bind = os.environ.get("DT_BENCH_TRAIN_BIND", "0") == "1"
    common = ["--steps", str(a.steps), "--clip", "0", "--json"] + model_args
    env = benchlib.launcher_env()
    torchrun = benchlib.torchrun(python, 2)
    plans = {}  # case -> (threads per rank, [(side, make_cmd(wrap))])
    for c in cases:
        if c == "1":
            threads = max(1, cores)
            args = ["--threads", str(threads)] + common
            d = lambda wrap, args=args: wrap + [train_gpt] + args
            t = lambda wrap, args=args: wrap + [python, TWIN] + args
        else:
            threads = max(1, cores // 2)
            args = ["--dp", "1", "--tp", "2", "--threads", str(threads)] + common
            d = lambda wrap, args=args: [dtrun, "--nproc-per-node", "2"] + wrap + [train_gpt] + args
            t = lambda wrap, args=args: torchrun + wrap + [python, TWIN] + args
        sides = [("torch", t)] + ([] if torch_only else [("dtensor", d)])
        if not a.no_sdpa:
            sides.append(("torch-sdpa", lambda wrap, t=t: t(wrap) + ["--sdpa"]))
        plans[c] = (threads, sides)

    results = {}  # (case, side) -> [summary per round]
    failed = 0
    start = time.monotonic()
    for rnd in range(1, a.rounds + 1):
        log(f"== bench/train round {rnd}/{a.rounds}")
        for c in cases:
            sides = plans[c][1]
            pair = benchlib.in_round_order([x for x in sides if x[0] != "torch-sdpa"], rnd)
            for side, make_cmd in pair + [x for x in sides if x[0] == "torch-sdpa"]:
                s = run_one(f"{c} {side}", make_cmd, env, a.warmup, bind and c != "1")
                if s is None:
                    failed += 1
                else:
                    s["round"] = rnd
                    results.setdefault((c, side), []).append(s)
    log(f"== bench/train: {time.monotonic() - start:.0f} s")

    def med(c, side):
        v = results.get((c, side))
        if not v:
            return None
        n = max(len(x["peaks"]) for x in v)
        peaks = [max(x["peaks"][i] for x in v if i < len(x["peaks"])) for i in range(n)]
        return {"ms": 1e3 * statistics.median(x["step_s"] for x in v), "peaks": peaks, "rounds": len(v),
                "own_peak": max(x["own_peak"] for x in v), "params": v[0]["params"] or
                (dtensor_params if side == "dtensor" else None)}

    def round_ratios(c, side):
        """dtensor / side per round, from the runs made back to back (less exposed to drift than medians)."""
        ref = {x["round"]: x["step_s"] for x in results.get((c, side), [])}
        return [x["step_s"] / ref[x["round"]] for x in results.get((c, "dtensor"), []) if x["round"] in ref]

    def mib(peaks):
        return "/".join(f"{b / 2**20:.0f}" for b in peaks) if peaks else "-"

    log(f"\nGPT training step, ms/step: median over rounds of each run's median step after {a.warmup} warm-up steps "
        f"(model args: {' '.join(model_args) or 'defaults'}, --clip 0{', tp2 ranks pinned to cores' if bind else ''})"
        ". Peak RSS per rank in MiB (rank 0/rank 1), "
        "PyTorch's including the ~530 MiB of import torch; 'dt alloc': dtensor's allocator peak, rank 0")
    log("'rounds': the range of the per-round ratios (both sides run back to back in each round)")
    table, notes = [], []
    met = total = 0
    for c in cases:
        threads = plans[c][0]
        d, t, s = med(c, "dtensor"), med(c, "torch"), med(c, "torch-sdpa")
        for label, side, ref, target in ((NAMES[c], "torch", t, TARGETS[c]),
                                         (NAMES[c] + ", torch SDPA", "torch-sdpa", s, None)):
            if ref is None and (target is None or d is None):
                continue
            ratio = d["ms"] / ref["ms"] if d and ref else None
            per_round = round_ratios(c, side)
            cells = [f"{d['ms']:.2f}" if d else "-", f"{ref['ms']:.2f}" if ref else "-",
                     f"{ratio:.2f}x" if ratio else "-",
                     f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else "-",
                     f"{target:.1f}x" if target else "info",
                     mib(d["peaks"]) if d else "-", mib(ref["peaks"]) if ref else "-",
                     f"{d['own_peak'] / 2**20:.1f}" if d else "-"]
            table.append([label, threads] + cells)
            if target and ratio:
                total += 1
                met += ratio <= target
            print(json.dumps({
                "bench": "train", "case": c, "ranks": 1 if c == "1" else 2, "threads_per_rank": threads,
                "torch_attention": "explicit" if target else "sdpa",
                "dtensor_ms": round(d["ms"], 4) if d else None, "torch_ms": round(ref["ms"], 4) if ref else None,
                "ratio": round(ratio, 4) if ratio else None, "target": target,
                "ratio_per_round": [round(r, 4) for r in per_round],
                "dtensor_peak_rss_bytes": d["peaks"] if d else None,
                "torch_peak_rss_bytes": ref["peaks"] if ref else None,
                "dtensor_allocator_peak_bytes": d["own_peak"] if d else None,
                "dtensor_params": d["params"] if d else None, "torch_params": ref["params"] if ref else None,
                "rounds": min(x["rounds"] for x in (d, ref) if x), "bound": bind and c != "1"}), flush=True)
        if d and t and d["params"] and t["params"] and d["params"] != t["params"]:
            notes.append(f"  {NAMES[c]}: the parameter counts differ: dtensor {d['params']}, torch {t['params']}")
    return benchlib.report("bench/train", ["case", "threads", "dtensor", "torch", "ratio", "rounds", "target",
                                           "dtensor RSS", "torch RSS", "dt alloc"], table, met, total, failed, notes)


if __name__ == "__main__":
    sys.exit(main())
