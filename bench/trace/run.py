#!/usr/bin/python3
"""bench/trace: what recording a timeline costs (DT_TRACE, core/trace.h), on bench/train's and bench/fsdp's GPT steps.

Usage: run.py BUILD_DIR [--rounds N] [--steps N] [--warmup N] [--cases train,fsdp]

Cases:
  train     examples/train_gpt with bench/train's default model (--clip 0), one process (under dtrun, so that it has
            a process group), nproc threads
  fsdp      the same with FSDP on 2 processes (dtrun, --fsdp --dp 2), nproc/2 threads each
  fsdp-mlp  bench/fsdp's MLP (bench/fsdp_mlp --fsdp --dp 2, batch 8: bench/fsdp's batch-8 row), 2 processes, 1 thread
            each, 15 steps a run
Each round runs every case untraced and traced (DT_TRACE set to a fresh folder; which goes first alternates), a
run's step time is the median of its steps after the warm-up, a row the median over rounds. Target: traced / untraced
<= 1.02 (at most 2 % of a step). The traced runs' files say how many spans a step records (events / steps): the
cost of tracing when off is one predictable branch per span site reached, which this count bounds.
Prints every round, the table on stderr and one JSON line per case on stdout.
"""
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402

TARGET = 1.02


def events_per_step(folder, steps):
    """Events (spans) rank 0 recorded per step, from its trace file."""
    path = os.path.join(folder, "rank-00000.trace.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        meta = json.load(f)["dtensor"]
    return (meta["events"] + meta["dropped"]) / max(steps, 1)


def main():
    ap = benchlib.driver_parser("the cost of DT_TRACE on training steps", "DT_BENCH_TRACE", 60,
                                ("train", "fsdp", "fsdp-mlp"), rounds=7)
    a = benchlib.parse_driver_args(ap, sys.argv[1:])
    if not benchlib.programs_built(a.build, ["examples/train_gpt", "tools/dtrun", "bench/fsdp_mlp"], "bench/trace"):
        return 1
    fsdp_mlp = os.path.join(a.build, "bench", "fsdp_mlp")
    train_gpt = os.path.join(a.build, "examples", "train_gpt")
    dtrun = os.path.join(a.build, "tools", "dtrun")
    cores = os.cpu_count() or 1
    scratch = tempfile.mkdtemp(prefix="dt-bench-trace-")
    counter = [0]

    def traced(cmd):
        counter[0] += 1
        folder = os.path.join(scratch, f"run{counter[0]}")
        return lambda: ["env", f"DT_TRACE={folder}"] + cmd, folder

    plans, folders = [], {}
    for case in a.cases:
        common = ["--steps", str(a.steps), "--clip", "0", "--json"] + a.model_args
        if case == "fsdp-mlp":
            cmd = [dtrun, "--nproc-per-node", "2", fsdp_mlp, "--fsdp", "--dp", "2", "--threads", "1", "--batch", "8",
                   "--steps", "15", "--json"]
        elif case == "train":
            # Under dtrun: DT_TRACE starts with the process group, which train_gpt alone does not make.
            cmd = [dtrun, "--nproc-per-node", "1", train_gpt, "--threads", str(cores)] + common
        else:
            cmd = [dtrun, "--nproc-per-node", "2", train_gpt, "--fsdp", "--dp", "2",
                   "--threads", str(max(1, cores // 2))] + common
        sides = [("off", lambda cmd=cmd: cmd)]
        # Each traced run writes to a folder of its own (the round's number in its name).
        def on(cmd=cmd, case=case):
            make, folder = traced(cmd)
            folders.setdefault(case, []).append(folder)
            return make()
        sides.append(("on", on))
        plans.append((case, sides))
    try:
        results, failed = benchlib.run_rounds(plans, a.rounds, "bench/trace")
        rows, met, total = [], 0, 0
        for case in a.cases:
            per_round = {}
            for impl in ("off", "on"):
                for rnd, out in results.get((case, impl), []):
                    per_round.setdefault(rnd, {})[impl] = benchlib.median_step_s(benchlib.step_rows(out), a.warmup)
            rounds = sorted(r for r, v in per_round.items() if len(v) == 2)
            for r in rounds:
                v = per_round[r]
                log(f"   {case} round {r}: off {v['off'] * 1e3:.2f} ms, on {v['on'] * 1e3:.2f} ms, "
                    f"ratio {v['on'] / v['off']:.3f}")
            if not rounds:
                continue
            off = statistics.median(per_round[r]["off"] for r in rounds)
            on = statistics.median(per_round[r]["on"] for r in rounds)
            ratios = [per_round[r]["on"] / per_round[r]["off"] for r in rounds]
            ratio = statistics.median(ratios)
            steps = 15 if case == "fsdp-mlp" else a.steps
            spans = events_per_step(folders[case][-1], steps) if folders.get(case) else None
            total += 1
            met += ratio <= TARGET
            rows.append([case, f"{off * 1e3:.2f}", f"{on * 1e3:.2f}", f"{ratio:.3f}",
                         " ".join(f"{x:.3f}" for x in ratios), benchlib.fmt(spans, ".0f"), f"<= {TARGET}"])
            print(json.dumps({"bench": "trace", "case": case, "off_ms": off * 1e3, "on_ms": on * 1e3, "ratio": ratio,
                              "ratios": ratios, "spans_per_step": spans, "target": TARGET}), flush=True)
        return benchlib.report("bench/trace",
                               ["case", "off ms", "on ms", "on/off", "rounds (on/off)", "spans/step", "target"],
                               rows, met, total, failed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
