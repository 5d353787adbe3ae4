#!/usr/bin/python3
"""bench/pipeline: the bubble of each pipeline schedule, measured from the per-rank timelines, against its theory.

Usage: run.py BUILD_DIR [--ranks 4] [--microbatches 8] [--steps 4] [--forward-ms 20] [--schedules gpipe,1f1b,...]

For each schedule, `dtrun --nproc-per-node P pipeline_bubble` runs PipelineRunner with DT_TRACE set, on stages that
sleep instead of computing (forward F ms, backward 2F ms, half of it the weights' W under ZB-H1; an interleaved
rank's v stages F / v each): 4 ranks on a 2-core machine would otherwise measure the cores' contention, not the
schedule. Each rank's trace has a step span per
step and a span per action; a rank's bubble in a step is 1 - (its F and B spans) / (its step span), the step ending
with the runner's loss all-reduce, so every rank's step spans the whole pipeline. The first step is a warm-up; a
schedule's row is the median over the other steps of the mean over ranks, and every step's figure is printed.
Theory (pipeline::theory_bubble, printed by the program): (p - 1) / (v m + p - 1) for GPipe, 1F1B and interleaved
1F1B, (p - 1) / (3 m + p - 1) for ZB-H1 at these costs (p = 4, m = 8: 27.3 %, 15.8 % at v = 2, 11.1 %); the
simulator's figure (pipeline::simulate at the same costs) beside it. Target: within 3 points of theory.

Prints the table on stderr and one JSON line per schedule on stdout. Exits 1 when a run failed.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ACTION = re.compile(r"^\d+(F|B|I|W)\d+$")  # the compute actions' spans
CASES = {"gpipe": 1, "1f1b": 1, "interleaved": 2, "zb-h1": 1}  # name -> stages per rank


def measure(trace_dir):
    """Per step (after the first): the mean over ranks of 1 - compute / step; and per rank."""
    per_rank = {}
    for path in sorted(glob.glob(os.path.join(trace_dir, "rank-*.trace.json"))):
        doc = json.load(open(path))
        rank = doc["dtensor"]["rank"]
        xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e for e in xs if e["cat"] == "step"), key=lambda e: e["ts"])
        acts = [e for e in xs if e["cat"] == "user" and ACTION.match(e["name"])]
        rows = []
        for s in steps:
            t0, t1 = s["ts"], s["ts"] + s["dur"]
            busy = sum(min(a["ts"] + a["dur"], t1) - max(a["ts"], t0) for a in acts if a["ts"] < t1 and a["ts"] + a["dur"] > t0)
            rows.append(1.0 - busy / s["dur"])
        per_rank[rank] = rows
    nsteps = min(len(v) for v in per_rank.values())
    steps = [statistics.mean(per_rank[r][k] for r in per_rank) for k in range(1, nsteps)]
    return steps, {r: statistics.median(v[1:]) for r, v in per_rank.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--forward-ms", type=float, default=20.0)
    ap.add_argument("--schedules", default=",".join(CASES))
    a = ap.parse_args()
    prog = os.path.join(a.build, "bench", "pipeline_bubble")
    dtrun = os.path.join(a.build, "tools", "dtrun")
    p, m = a.ranks, a.microbatches
    rows, failed = [], False
    for name in a.schedules.split(","):
        v = CASES[name]
        with tempfile.TemporaryDirectory(prefix="dt_bubble_") as d:
            env = dict(os.environ, DT_TRACE=d)
            cmd = [dtrun, "--nproc-per-node", str(p), prog, "--schedule", name, "--microbatches", str(m),
                   "--stages-per-rank", str(v), "--steps", str(a.steps), "--forward-ms", str(a.forward_ms)]
            print(f"   {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(f"   {name}: failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}", file=sys.stderr)
                failed = True
                continue
            sim = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
            steps, ranks = measure(d)
        theory = sim["theory_bubble"]
        measured = statistics.median(steps)
        row = {"bench": "pipeline_bubble", "schedule": name, "ranks": p, "microbatches": m, "stages_per_rank": v,
               "forward_ms": a.forward_ms, "measured_bubble": round(measured, 5),
               "measured_per_step": [round(x, 5) for x in steps],
               "measured_per_rank": {str(k): round(x, 5) for k, x in sorted(ranks.items())},
               "theory_bubble": round(theory, 5), "simulated_bubble": round(sim["simulated_bubble"], 5),
               "difference_points": round(100 * (measured - theory), 2), "target_points": 3.0,
               "met": abs(measured - theory) <= 0.03}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nbench/pipeline: p {p}, m {m}, forward {a.forward_ms:g} ms, backward {2 * a.forward_ms:g} ms a microbatch "
          f"and rank (sleeping stages), {a.steps} steps (the first a warm-up)", file=sys.stderr)
    print(f"{'schedule':<12} {'v':>2} {'measured':>9} {'theory':>7} {'simulated':>9} {'diff':>7}  per step / per rank",
          file=sys.stderr)
    for x in rows:
        print(f"{x['schedule']:<12} {x['stages_per_rank']:>2} {100 * x['measured_bubble']:>8.1f}% "
              f"{100 * x['theory_bubble']:>6.1f}% {100 * x['simulated_bubble']:>8.1f}% {x['difference_points']:>+6.2f}  "
              f"{', '.join(f'{100 * s:.1f}' for s in x['measured_per_step'])} / "
              f"{', '.join(f'{k}: {100 * s:.1f}' for k, s in x['measured_per_rank'].items())}", file=sys.stderr)
    met = sum(x["met"] for x in rows)
    print(f"targets met (within 3 points of theory): {met} of {len(rows)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
