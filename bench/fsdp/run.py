#!/usr/bin/python3
"""bench/fsdp: dtensor's FSDP (fsdp/fully_shard.h) against PyTorch FSDP2 on gloo, and both against one process.

Usage: run.py BUILD_DIR [--torch-only] [--rounds N] [--steps N] [--warmup N] [--cases mlp,mlp-tp,gpt]
              [--batches 2,8] [-- MLP_ARGS...]

Cases (dtensor: bench/fsdp_mlp, examples/train_gpt; PyTorch: bench/fsdp/torch_fsdp.py from the benchmarks' venv):
  mlp     the residual MLP stack (4 blocks, 512 -> 2048 -> 512, seq 128) at each global batch of --batches:
          one process with nproc threads (dtensor, PyTorch eager) and FSDP on 2 processes with nproc/2 threads
          each (fsdp_mlp --fsdp --dp 2 under dtrun; FSDP2 under torchrun).
          targets: dtensor FSDP <= 0.5x PyTorch FSDP2 at batch 2, <= 0.7x at batch 8; <= 1.15x dtensor's own
          one-process step at the same global batch.
          Beside them, one rank's share without communication: one process with nproc/2 threads at half the
          global batch (the whole model's optimizer step, which FSDP halves). It splits 'vs 1 proc' in two: what
          the data-parallel split costs (share / one process: each rank computes the full weight gradients from
          half the tokens) and what the communication costs on the same cores (FSDP / share).   information
  mlp-tp  FSDP + TP on a (dp 2, tp 2) mesh, 4 processes, batch 8 (the largest of --batches): parallelize_module
          (fc1 Colwise, fc2 Rowwise) then fully_shard over dp, both sides.               target: <= 0.7x PyTorch
  gpt     bench/train's GPT (default config), one process and FSDP on 2 processes: train_gpt [--fsdp --dp 2]
          --clip 0 against torch_fsdp.py --model gpt.                                     information
Memory, per rank: the peak RSS above the process's footprint just before the model is built (each program
measures both; PyTorch's footprint includes import torch and its process group). Target: dtensor <= PyTorch, and
the most dtensor held during the steps (dt::memory_usage's total peak) <= 1.1x the theory fsdp_mlp prints (Note [The
MLP benchmark's memory from its shapes] in bench/fsdp/fsdp_mlp.cc).
The share of the FSDP engine's communication hidden behind compute (1 - exposed / issued, dt::fsdp::CommStatsObserver
over the steps after the warm-up) is printed beside.

Each round runs every side of every case (the order alternates from round to round: shared machines drift); a run's
step time is the median of its step_s after the warm-up steps; a row reports the median over rounds and the
largest memory figure. Prints the table on stderr and one JSON line per (case, side) on stdout:
  {"bench":"fsdp","case":..,"impl":"dtensor"|"torch"|"torch-fsdp2","model":..,"ranks":..,"batch":..,"step_ms":..,
   "peak_bytes":.. (peak RSS above the footprint, the largest rank), ...}
Exits 1 when a run failed.

Environment: DT_BENCH_FSDP_ROUNDS (5), DT_BENCH_FSDP_STEPS (10), DT_BENCH_FSDP_WARMUP (3), DT_BENCH_FSDP_CASES,
DT_BENCH_FSDP_ARGS (MLP model arguments for both sides, e.g. "--layers 2 --dim 256"), DT_BENCH_FSDP_TORCH_ONLY=1,
DT_BENCH_VENV (the PyTorch venv; also DT_BENCH_TRAIN_VENV; default BUILD_DIR/py-venv).
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
TWIN = os.path.join(HERE, "torch_fsdp.py")
CASES = ("mlp", "mlp-tp", "gpt")
FSDP_TARGETS = {2: 0.5, 8: 0.7}  # dtensor FSDP / PyTorch FSDP2 at these global batches (the issue's)
TP_TARGET = 0.7
SELF_TARGET = 1.15  # dtensor FSDP on 2 processes / dtensor on one process, same global batch
MEMORY_TARGET = 1.0  # dtensor / PyTorch peak above the footprint
THEORY_TARGET = 1.1  # the most dtensor held (its memory accounting) / its theory


def summarize(rows, warmup):
    """One run: step time, losses, per-rank memory above the footprint, allocator and held peaks, theory, comm."""
    steps = benchlib.step_rows(rows)
    if not steps:
        return None
    summary = next((r for r in rows if "rss_peak_bytes_per_rank" in r or "memory" in r), {})
    mem = summary.get("memory", summary)
    if isinstance(mem, list):  # train_gpt's line: one entry per rank, from its memory accounting
        mem = {"held_peak_bytes_per_rank": [m["peak_bytes"] for m in mem],
               "theory_bytes": max(m.get("theory_bytes", 0) for m in mem) or None}
    bases, peaks = mem.get("rss_base_bytes_per_rank"), mem.get("rss_peak_bytes_per_rank")
    if bases and peaks:
        above = [p - b for p, b in zip(peaks, bases)]
    elif "rss_peak_bytes" in steps[-1] and "rss_base_bytes" in steps[-1]:
        above = [steps[-1]["rss_peak_bytes"] - steps[-1]["rss_base_bytes"]]  # rank 0 only
    else:
        above = None
    # dtensor's allocator peak: per rank from fsdp_mlp's summary, rank 0's from train_gpt's step lines.
    alloc = mem.get("peak_bytes_per_rank") or ([steps[-1]["peak_bytes"]] if "peak_bytes" in steps[-1] else None)
    comm = summary.get("comm") or next((r["comm"] for r in rows if isinstance(r.get("comm"), dict)), None)
    return {"step_s": benchlib.median_step_s(steps, warmup), "steps": len(steps), "loss_first": steps[0].get("loss"),
            "loss_last": steps[-1].get("loss"), "above": above, "alloc": alloc,
            "held": mem.get("held_peak_bytes_per_rank"), "theory": mem.get("theory_bytes"),
            "hidden": comm.get("hidden_share") if comm and comm.get("issued_s") else None,
            "params": summary.get("params")}


def main():
    ap = benchlib.driver_parser("dtensor's FSDP against PyTorch FSDP2", "DT_BENCH_FSDP", 10, CASES, rounds=5)
    ap.add_argument("--batches", default="2,8", help="global batches of the mlp case (default 2,8)")
    a = benchlib.parse_driver_args(ap, sys.argv[1:])
    build, cases, mlp_args, torch_only = a.build, a.cases, a.model_args, a.torch_only
    try:
        batches = [int(b) for b in a.batches.split(",") if b]
    except ValueError:
        ap.error(f"--batches takes comma-separated integers, got {a.batches!r}")
    if not batches or min(batches) < 2 or any(b % 2 for b in batches):
        ap.error(f"--batches: even global batches of at least 2 (split over 2 dp ranks), got {a.batches!r}")

    fsdp_mlp = os.path.join(build, "bench", "fsdp_mlp")
    train_gpt = os.path.join(build, "examples", "train_gpt")
    dtrun = os.path.join(build, "tools", "dtrun")
    torch_only = torch_only or not benchlib.programs_built(build, ["bench/fsdp_mlp"], "bench/fsdp")
    python = benchlib.ensure_venv(benchlib.venv_dir(build), "bench/fsdp")
    env = benchlib.launcher_env()
    cores = os.cpu_count() or 1
    common = ["--steps", str(a.steps), "--json"]

    def dt_side(program, nproc, args):
        if nproc == 1:
            return lambda: [program] + args
        return lambda: [dtrun, "--nproc-per-node", str(nproc), program] + args

    def torch_side(nproc, args):
        if nproc == 1:
            return lambda: [python, TWIN] + args
        return lambda: benchlib.torchrun(python, nproc) + [python, TWIN] + args

    # rows: (case key, label, model, batch, [(impl, ranks, threads per rank, make_cmd)])
    plans = []
    for c in cases:
        if c == "mlp":
            for b in batches:
                one = ["--batch", str(b), "--threads", str(cores)] + common + mlp_args
                two = ["--batch", str(b), "--dp", "2", "--threads", str(max(1, cores // 2))] + common + mlp_args
                sides = [("torch", 1, cores, torch_side(1, ["--model", "mlp"] + one)),
                         ("torch-fsdp2", 2, max(1, cores // 2), torch_side(2, ["--model", "mlp"] + two))]
                share = ["--batch", str(b // 2), "--threads", str(max(1, cores // 2))] + common + mlp_args
                if not torch_only:
                    sides[:0] = [("dtensor", 1, cores, dt_side(fsdp_mlp, 1, one)),
                                 ("dtensor-fsdp", 2, max(1, cores // 2), dt_side(fsdp_mlp, 2, ["--fsdp"] + two)),
                                 ("dtensor-share", 1, max(1, cores // 2), dt_side(fsdp_mlp, 1, share))]
                plans.append((f"mlp-b{b}", f"mlp, batch {b}", "mlp", b, sides))
        elif c == "mlp-tp":
            b = max(batches)
            four = ["--batch", str(b), "--dp", "2", "--tp", "2", "--threads", str(max(1, cores // 4))] + common + \
                mlp_args
            sides = [("torch-fsdp2", 4, max(1, cores // 4), torch_side(4, ["--model", "mlp"] + four))]
            if not torch_only:
                sides.insert(0, ("dtensor-fsdp", 4, max(1, cores // 4), dt_side(fsdp_mlp, 4, ["--fsdp"] + four)))
            plans.append((f"mlp-tp-b{b}", f"mlp, batch {b}, 2x2 mesh", "mlp", b, sides))
        else:
            gpt_one = ["--threads", str(cores)] + common
            gpt_two = ["--dp", "2", "--threads", str(max(1, cores // 2))] + common
            sides = [("torch", 1, cores, torch_side(1, ["--model", "gpt"] + gpt_one)),
                     ("torch-fsdp2", 2, max(1, cores // 2), torch_side(2, ["--model", "gpt"] + gpt_two))]
            if not torch_only and os.access(train_gpt, os.X_OK):
                sides[:0] = [("dtensor", 1, cores, dt_side(train_gpt, 1, gpt_one + ["--clip", "0"])),
                             ("dtensor-fsdp", 2, max(1, cores // 2),
                              dt_side(train_gpt, 2, ["--fsdp"] + gpt_two + ["--clip", "0"]))]
            plans.append(("gpt", "gpt (bench/train's), batch 8", "gpt", 8, sides))

    results = {}  # (case key, impl) -> [summary per round]
    failed = 0
    start = time.monotonic()
    for rnd in range(1, a.rounds + 1):
        log(f"== bench/fsdp round {rnd}/{a.rounds}")
        for key, _, _, _, sides in plans:
            for impl, ranks, threads, make_cmd in benchlib.in_round_order(sides, rnd):
                name = f"{key} {impl}"
                out = benchlib.run(name, make_cmd(), env)
                s = summarize(benchlib.parse_rows(out), a.warmup) if out is not None else None
                if s is None:
                    if out is not None:
                        log(f"   {name}: printed no step lines")
                    failed += 1
                    continue
                s["round"] = rnd
                results.setdefault((key, impl), []).append(s)
                above = "/".join(f"{x / 2**20:.0f}" for x in s["above"]) if s["above"] else "-"
                log(f"   {name}: {s['step_s'] * 1e3:.1f} ms/step, loss {s['loss_first']} -> {s['loss_last']}, peak RSS "
                    f"above the footprint MiB {above}"
                    + (f", hidden {100 * s['hidden']:.0f}%" if s["hidden"] is not None else "")
                    + f", {benchlib.run.last_s:.1f} s")
    log(f"== bench/fsdp: {time.monotonic() - start:.0f} s")

    def agg(key, impl):
        v = results.get((key, impl))
        if not v:
            return None
        above = [max(x["above"]) for x in v if x["above"]]
        alloc = [max(x["alloc"]) for x in v if x["alloc"]]
        held = [max(x["held"]) for x in v if x["held"]]
        hidden = [x["hidden"] for x in v if x["hidden"] is not None]
        theory = next((x["theory"] for x in v if x["theory"]), None)
        return {"ms": 1e3 * statistics.median(x["step_s"] for x in v), "rounds": len(v),
                "per_round": {x["round"]: x["step_s"] for x in v}, "above": max(above) if above else None,
                "alloc": max(alloc) if alloc else None, "held": max(held) if held else None, "theory": theory,
                "hidden": statistics.median(hidden) if hidden else None,
                "loss_last": v[-1]["loss_last"], "params": v[0]["params"]}

    def ratio(x, y, field="ms"):
        return x[field] / y[field] if x and y and x.get(field) and y.get(field) else None

    headers = ["case", "ranks", "dtensor ms", "torch ms", "ratio", "target", "vs 1 proc", "target", "dt MiB",
               "torch MiB", "ratio", "peak/theory", "hidden"]
    table, met, total = [], 0, 0

    def judge(value, target):
        nonlocal met, total
        if value is not None and target is not None:
            total += 1
            met += value <= target

    for key, label, model, batch, sides in plans:
        impls = {impl: (ranks, threads) for impl, ranks, threads, _ in sides}
        for dt_impl, ref_impl in (("dtensor", "torch"), ("dtensor-fsdp", "torch-fsdp2")):
            if dt_impl not in impls and ref_impl not in impls:
                continue
            d, t = agg(key, dt_impl), agg(key, ref_impl)
            ranks, threads = impls.get(dt_impl) or impls[ref_impl]
            fsdp = dt_impl == "dtensor-fsdp"
            target = None
            if fsdp and model == "mlp":
                target = TP_TARGET if key.startswith("mlp-tp") else FSDP_TARGETS.get(batch)
            one = agg(key, "dtensor") if fsdp else None
            self_ratio = ratio(d, one) if fsdp and not key.startswith("mlp-tp") else None
            # The most the program held (its memory accounting), else the allocator's peak, against the theory.
            measured = d and (d["held"] or d["alloc"])
            theory_ratio = measured / d["theory"] if measured and d["theory"] else None
            mem_ratio = ratio(d, t, "above")
            r = ratio(d, t)
            judge(r, target)
            judge(self_ratio, SELF_TARGET if self_ratio is not None and model == "mlp" else None)
            if fsdp and model == "mlp":
                judge(mem_ratio, MEMORY_TARGET)
                judge(theory_ratio, THEORY_TARGET)
            kind = ("FSDP + TP" if key.startswith("mlp-tp") else "FSDP") if fsdp else "1 process"
            table.append([f"{label}, {kind}", f"{ranks}x{threads}",
                          fmt(d and d["ms"], ".1f"), fmt(t and t["ms"], ".1f"), fmt(r, ".2f", "x"),
                          fmt(target, ".2f", "x") if target else "info", fmt(self_ratio, ".2f", "x"),
                          f"{SELF_TARGET:.2f}x" if self_ratio is not None and model == "mlp" else None,
                          fmt(d and d["above"] and d["above"] / 2**20, ".0f"),
                          fmt(t and t["above"] and t["above"] / 2**20, ".0f"), fmt(mem_ratio, ".2f", "x"),
                          fmt(theory_ratio, ".2f", "x"),
                          fmt(100 * d["hidden"], ".0f", "%") if d and d["hidden"] is not None else None])
            for impl, x in ((dt_impl, d), (ref_impl, t)):
                if x is None:
                    continue
                row = {"bench": "fsdp", "case": key, "impl": "dtensor" if impl.startswith("dtensor") else impl,
                       "fsdp": impl in ("dtensor-fsdp", "torch-fsdp2"), "model": model, "ranks": ranks,
                       "threads_per_rank": threads, "batch": batch, "step_ms": round(x["ms"], 3),
                       "peak_bytes": x["above"], "rounds": x["rounds"], "loss_last": x["loss_last"]}
                if impl.startswith("dtensor"):
                    row.update({"allocator_peak_bytes": x["alloc"], "held_peak_bytes": x["held"],
                                "theory_bytes": x["theory"],
                                "hidden_share": None if x["hidden"] is None else round(x["hidden"], 4),
                                "ratio": None if r is None else round(r, 4), "target": target,
                                "ratio_vs_1_process": None if self_ratio is None else round(self_ratio, 4),
                                "memory_ratio": None if mem_ratio is None else round(mem_ratio, 4)})
                print(json.dumps(row), flush=True)

    log(f"\nbench/fsdp: ms/step (median over rounds of each run's median after {a.warmup} warm-up steps); ranks x "
        "threads per rank; 'vs 1 proc': dtensor FSDP / dtensor one process at the same global batch; MiB: the peak RSS "
        "above the footprint before the model (largest rank); 'peak/theory': the most dtensor held during the steps "
        "(its memory accounting; the allocator's peak where absent) / Note [The MLP benchmark's memory from its shapes]; 'hidden': "
        "communication hidden behind compute")
    rc = benchlib.report("bench/fsdp", headers, table, met, total, failed)
    for key, label, model, batch, sides in plans:
        share, one, fsdp = agg(key, "dtensor-share"), agg(key, "dtensor"), agg(key, "dtensor-fsdp")
        if not (share and one and fsdp):
            continue
        split, comm = ratio(share, one), ratio(fsdp, share)
        log(f"{label}: one rank's share without communication (1 process, batch {batch // 2}) {share['ms']:.1f} ms: "
            f"FSDP / 1 process {ratio(fsdp, one):.2f}x = the data-parallel split {split:.2f}x (share / 1 process) "
            f"x the communication on the same cores {comm:.2f}x (FSDP / share)")
        print(json.dumps({"bench": "fsdp", "case": key, "impl": "dtensor", "fsdp": False, "model": model,
                          "ranks": 1, "batch": batch // 2, "global_batch": batch, "share_of": "dtensor-fsdp",
                          "step_ms": round(share["ms"], 3), "rounds": share["rounds"],
                          "split_ratio": round(split, 4), "communication_ratio": round(comm, 4)}), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
