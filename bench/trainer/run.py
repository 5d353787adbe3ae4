#!/usr/bin/python3
"""bench/trainer: the trainer dttrain (tools/dttrain.cc) against its PyTorch twin (bench/trainer/torch_llama.py):
the same Llama, the same token file, the same recipe, FSDP on 2 processes on both sides.

Usage: run.py BUILD_DIR [--torch-only] [--rounds N] [--steps N] [--warmup N] [--cases f32,bf16] [--small]
              [-- MODEL_ARGS...]

The model (default): a Llama of 32 M parameters, vocabulary 8192, dim 512, 8 layers, 8 query / 4 key-value heads,
SwiGLU width 1408, untied output, weights from dttrain's default init (Normal(0, 0.02) truncated at +-2 std, the
residual output projections' std divided by sqrt(2 (l + 1)): given to both sides); seq 256, global batch 8 (2048
tokens a step), grad_accum 1. The recipe: AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 0.1 but on norms and
embeddings), lr warmup 1 step then cosine to 0 over the run, gradients clipped to a norm of 1.0. The data: the King
James Bible (Debian's bible-kjv) tokenized once by tools/prepare_tokens.py (a byte-level BPE of the model's
vocabulary) into BUILD_DIR/bench-data/kjv-VOCAB.bin.
--small: dim 128, 2 layers, 4 / 2 heads, hidden 352, seq 128, global batch 4 (a quick check of the driver).
MODEL_ARGS (after --, or DT_BENCH_TRAINER_ARGS) change it: --vocab --dim --layers --heads --kv-heads --hidden --seq
--global-batch --grad-accum --lr --lr-warmup --max-norm --seed.

Cases, 2 processes with nproc / 2 threads each on both sides:
  f32   dtrun --nproc-per-node 2 dttrain --parallelism.dp 2 (FSDP) against torchrun --nproc-per-node 2
        torch_llama.py (FSDP2 on gloo), both in f32.
  bf16  the same with mixed_precision.param_dtype bf16, reduce_dtype f32 on both sides.
The target, dtensor / torch <= 0.7x, applies to bf16 where the CPU multiplies bf16 natively (avx512_bf16 or
amx_bf16 in /proc/cpuinfo: both sides then run bf16 GEMMs, dtensor through oneDNN), else to f32; the other row is
information.
Each round runs both sides of every case one after the other (which goes first alternates from round to round:
shared machines drift). A run's step time is the median of its steps after the warm-up steps (dttrain's from its
JSON log: global_batch * seq / tokens_per_s; the twin's step_s times the same work); a row is the median over rounds,
and every round's figures are printed too. MFU: each side's own, 6 * (params - vocab * dim) + 12 * layers * dim * seq
FLOPs a token (the untied embedding table is looked up, not multiplied) against the rank's best of 3 f32 1024^3 GEMMs
(dttrain's formula and peak; the twin measures torch.mm the same way).
Memory: dttrain's peak_bytes (its allocator's peak, the largest rank) and the twin's peak RSS per rank (ru_maxrss;
it includes about 580 MiB of import torch and the process group, shown beside as the part above that footprint).
The losses of step 1 (both about ln(vocab)) and the parameter counts of both sides are printed: they must agree
(dttrain's exact count from the tensor shapes of its model exported with --training.steps 0 --checkpoint.export_hf:
its own line prints millions).

Prints the table on stderr and one JSON line per case on stdout:
  {"bench":"trainer","case":"f32","param_dtype":"f32","ranks":2,"threads_per_rank":1,"dtensor_ms":..,"torch_ms":..,
   "ratio":..,"target":0.7,"ratio_per_round":[..],"dtensor_mfu":..,"torch_mfu":..,"dtensor_peak_bytes":..,
   "torch_peak_rss_bytes":[..],...}
Exits 1 when a run failed.

Environment: DT_BENCH_TRAINER_ROUNDS (5), DT_BENCH_TRAINER_STEPS (4), DT_BENCH_TRAINER_WARMUP (1),
DT_BENCH_TRAINER_CASES, DT_BENCH_TRAINER_ARGS (MODEL_ARGS), DT_BENCH_TRAINER_TORCH_ONLY=1, DT_BENCH_VENV (the
PyTorch venv; default BUILD_DIR/py-venv, which also needs `tokenizers` for tools/prepare_tokens.py: ./dev deps).
"""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import fmt, log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TWIN = os.path.join(HERE, "torch_llama.py")
RANKS = 2
def _cpu_has_bf16():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


TARGETS = {"f32": None, "bf16": 0.7} if _cpu_has_bf16() else {"f32": 0.7, "bf16": None}
INIT = {"std": 0.02, "cutoff": 2.0, "depth": "depth"}  # dttrain's model.init_* defaults, passed to both sides
MODELS = {
    "default": {"vocab": 8192, "dim": 512, "layers": 8, "heads": 8, "kv_heads": 4, "hidden": 1408, "seq": 256,
                "global_batch": 8},
    "small": {"vocab": 8192, "dim": 128, "layers": 2, "heads": 4, "kv_heads": 2, "hidden": 352, "seq": 128,
              "global_batch": 4},
}


def model_args(argv, preset, error):
    """The model and recipe from MODEL_ARGS over the preset's defaults."""
    p = argparse.ArgumentParser(prog="run.py ... --", add_help=False)
    for name, value in MODELS[preset].items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=value)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--lr-warmup", type=int, default=1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    try:
        m, rest = p.parse_known_args(argv)
    except SystemExit:
        error(f"model arguments: cannot read {' '.join(argv)}")
    if rest:
        error(f"model arguments: unknown {' '.join(rest)}")
    if m.dim % m.heads or (m.dim // m.heads) % 2 or m.heads % m.kv_heads:
        error(f"model arguments: dim must be a multiple of heads with an even head dim, and heads a multiple of "
              f"kv-heads; got dim {m.dim}, heads {m.heads}, kv-heads {m.kv_heads}")
    if m.global_batch % (m.grad_accum * RANKS):
        error(f"model arguments: --global-batch {m.global_batch} must be a multiple of --grad-accum {m.grad_accum} "
              f"x {RANKS} ranks")
    return m


def token_file(python, build, vocab):
    """BUILD/bench-data/kjv-VOCAB.bin, made by tools/prepare_tokens.py the first time; None when that failed."""
    stem = os.path.join(build, "bench-data", f"kjv-{vocab}")
    if not (os.path.exists(stem + ".bin") and os.path.exists(stem + ".json")):
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        log(f"bench/trainer: tokenizing the King James Bible into {stem}.bin (a BPE of {vocab} tokens)")
        p = subprocess.run([python, os.path.join(ROOT, "tools", "prepare_tokens.py"), "--kjv", "--out", stem,
                            "--vocab-size", str(vocab)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            log(f"bench/trainer: tools/prepare_tokens.py failed:\n{p.stdout[-2000:]}")
            return None
    return stem + ".bin"


def flops_per_token(m, params):
    """dttrain's model FLOPs per token (tools/dttrain.cc; torch_llama.py computes the same): 6 per parameter but the
    untied embedding table's, plus attention's scores and sums."""
    return 6.0 * (params - m.vocab * m.dim) + 12.0 * m.layers * m.dim * m.seq


def dttrain_params(dttrain, args, folder):
    """dttrain's exact parameter count: the model made and exported untrained (--training.steps 0), the element
    counts of the shapes in its model.safetensors header summed. None on failure."""
    with tempfile.TemporaryDirectory(dir=folder) as out:
        cmd = [dttrain, "/dev/null"] + args + ["--training.steps", "0", "--training.threads", "1",
                                               "--logging.peak_flops", "1e9", "--checkpoint.export_hf", out]
        if benchlib.run("dttrain's parameter count", cmd, benchlib.launcher_env()) is None:
            return None
        with open(os.path.join(out, "model.safetensors"), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def summarize(rows, warmup, tokens_per_step, fpt):
    """One run: step time, MFU, peak FLOP/s, step-1 and last losses, memory, params. dttrain's step lines (its JSON
    log on stdout) carry tokens_per_s and mfu, the twin's step_s and mfu too."""
    steps = [dict(r, step_s=r.get("step_s") or tokens_per_step / r["tokens_per_s"]) for r in rows
             if "step" in r and ("step_s" in r or r.get("tokens_per_s"))]
    if not steps:
        return None
    start = next((r for r in rows if "peak_flops" in r), {})
    end = next((r for r in rows if "rss_peak_bytes_per_rank" in r), {})
    timed = [r for r in steps if r["step"] > warmup] or steps
    mfu = statistics.median(r["mfu"] for r in timed)
    s = {"step_s": benchlib.median_step_s(steps, warmup), "mfu": mfu,
         "loss_first": steps[0]["loss"] if steps[0]["step"] == 1 else None, "loss_last": steps[-1]["loss"],
         "params": start.get("params"), "alloc_peak": max((r["peak_bytes"] for r in steps if "peak_bytes" in r),
                                                         default=None),
         "rss_peaks": end.get("rss_peak_bytes_per_rank"), "rss_bases": end.get("rss_base_bytes_per_rank")}
    # dttrain's peak from its own MFU (mfu = tokens_per_s * flops_per_token / ranks / peak), the twin's as printed.
    s["peak_flops"] = start.get("peak_flops") or (fpt and timed[-1]["tokens_per_s"] * fpt / RANKS / timed[-1]["mfu"])
    return s


def main():
    ap = benchlib.driver_parser("dttrain against PyTorch FSDP2 on gloo: the same Llama, data and recipe",
                                "DT_BENCH_TRAINER", 4, tuple(TARGETS), rounds=5)
    ap.set_defaults(warmup=int(os.environ.get("DT_BENCH_TRAINER_WARMUP", "1")))
    ap.add_argument("--small", action="store_true", help="a small model (dim 128, 2 layers): a quick check")
    a = benchlib.parse_driver_args(ap, sys.argv[1:])
    m = model_args(a.model_args, "small" if a.small else "default", ap.error)
    build = a.build
    dttrain = os.path.join(build, "tools", "dttrain")
    dtrun = os.path.join(build, "tools", "dtrun")
    torch_only = a.torch_only or not benchlib.programs_built(build, ["tools/dttrain"], "bench/trainer")
    python = benchlib.ensure_venv(benchlib.venv_dir(build), "bench/trainer")
    data = token_file(python, build, m.vocab)
    if data is None:
        return 1
    threads = max(1, (os.cpu_count() or 1) // RANKS)
    tokens_per_step = m.global_batch * m.seq
    model_dt = ["--model.vocab", m.vocab, "--model.dim", m.dim, "--model.layers", m.layers, "--model.heads", m.heads,
                "--model.kv_heads", m.kv_heads, "--model.hidden", m.hidden, "--model.init_std", INIT["std"],
                "--model.init_cutoff", INIT["cutoff"], "--model.init_depth", INIT["depth"], "--training.seed", m.seed,
                "--data.path", data, "--data.val_every", 0, "--logging.log_file", "/dev/stdout"]
    model_dt = [str(x) for x in model_dt]
    dt_params = None if torch_only else dttrain_params(dttrain, model_dt, os.path.dirname(data))
    fpt = dt_params and flops_per_token(m, dt_params)
    recipe_dt = model_dt + [str(x) for x in [
        "--training.seq", m.seq, "--training.global_batch", m.global_batch, "--training.grad_accum", m.grad_accum,
        "--training.steps", a.steps, "--training.threads", threads, "--training.max_norm", m.max_norm,
        "--optimizer.lr", m.lr, "--lr_schedule.kind", "cosine", "--lr_schedule.warmup", m.lr_warmup,
        "--parallelism.dp", RANKS, "--parallelism.fsdp", "true"]]
    twin = [str(x) for x in [
        "--data", data, "--vocab", m.vocab, "--dim", m.dim, "--layers", m.layers, "--heads", m.heads, "--kv-heads",
        m.kv_heads, "--hidden", m.hidden, "--seq", m.seq, "--global-batch", m.global_batch, "--grad-accum",
        m.grad_accum, "--steps", a.steps, "--lr", m.lr, "--warmup", m.lr_warmup, "--max-norm", m.max_norm,
        "--threads", threads, "--seed", m.seed, "--init-std", INIT["std"], "--init-cutoff", INIT["cutoff"],
        "--init-depth", INIT["depth"]]]
    plans = []
    for c in a.cases:
        dt_args = recipe_dt + ["--mixed_precision.param_dtype", c, "--mixed_precision.reduce_dtype", "f32"]
        sides = [("torch", lambda c=c: benchlib.torchrun(python, RANKS) + [python, TWIN] + twin + ["--param-dtype", c])]
        if not torch_only:
            sides.insert(0, ("dtensor", lambda x=dt_args: [dtrun, "--nproc-per-node", str(RANKS), dttrain, "/dev/null"]
                             + x))
        plans.append((c, sides))
    log(f"bench/trainer: {m.layers} layers, dim {m.dim}, {m.heads} / {m.kv_heads} heads, hidden {m.hidden}, vocab "
        f"{m.vocab}, batch {m.global_batch} x seq {m.seq}, grad_accum {m.grad_accum}, {a.steps} steps ({a.warmup} "
        f"warm-up), {RANKS} ranks x {threads} thread(s), data {data}")
    start = time.monotonic()
    results, failed = benchlib.run_rounds(plans, a.rounds, "bench/trainer")
    log(f"== bench/trainer: {time.monotonic() - start:.0f} s")

    runs = {}  # (case, side) -> {round: summary}
    for (c, side), per_round in results.items():
        for rnd, rows in per_round:
            s = summarize(rows, a.warmup, tokens_per_step, fpt)
            if s is None:
                log(f"   {c} {side} round {rnd}: printed no step lines")
                failed += 1
            else:
                runs.setdefault((c, side), {})[rnd] = s

    def mib(b):
        return fmt(b and b / 2**20, ".0f")

    log("\nevery round (ms/step: the median after the warm-up; MFU; loss at step 1 -> the last; peak GFLOP/s per rank)")
    for c, _ in plans:
        for rnd in range(1, a.rounds + 1):
            cells = []
            for side in ("dtensor", "torch"):
                s = runs.get((c, side), {}).get(rnd)
                if s:
                    cells.append(f"{side} {1e3 * s['step_s']:.1f} ms, MFU {100 * s['mfu']:.1f}%, loss "
                                 f"{fmt(s['loss_first'], '.4f')} -> {s['loss_last']:.4f}, peak "
                                 f"{fmt(s['peak_flops'] and s['peak_flops'] / 1e9, '.1f')}")
            d, t = runs.get((c, "dtensor"), {}).get(rnd), runs.get((c, "torch"), {}).get(rnd)
            ratio = f"; ratio {d['step_s'] / t['step_s']:.2f}x" if d and t else ""
            log(f"  {c} round {rnd}: " + "; ".join(cells) + ratio)

    headers = ["case", "ranks", "dtensor ms", "torch ms", "ratio", "rounds", "target", "MFU dt", "MFU torch",
               "dt peak MiB", "torch RSS MiB (above import)"]
    table, notes = [], []
    met = total = 0
    ln_vocab = math.log(m.vocab)
    for c, _ in plans:
        d, t = runs.get((c, "dtensor"), {}), runs.get((c, "torch"), {})

        def med(v, key):
            return statistics.median(x[key] for x in v.values()) if v else None

        dms, tms = med(d, "step_s"), med(t, "step_s")
        dms, tms = dms and 1e3 * dms, tms and 1e3 * tms
        ratio = dms / tms if dms and tms else None
        per_round = [d[r]["step_s"] / t[r]["step_s"] for r in sorted(d) if r in t]
        target = TARGETS[c]
        if target and ratio:
            total += 1
            met += ratio <= target
        alloc = max((x["alloc_peak"] for x in d.values() if x["alloc_peak"]), default=None)
        rss = [max(x["rss_peaks"][i] for x in t.values() if x["rss_peaks"]) for i in range(RANKS)] \
            if any(x["rss_peaks"] for x in t.values()) else None
        above = [max(x["rss_peaks"][i] - x["rss_bases"][i] for x in t.values() if x["rss_peaks"])
                 for i in range(RANKS)] if rss else None
        torch_params = next((x["params"] for x in t.values() if x["params"]), None)
        loss1 = {side: [v[r]["loss_first"] for r in sorted(v)] for side, v in (("dtensor", d), ("torch", t))}
        table.append([f"{c} (FSDP, dp {RANKS})", f"{RANKS}x{threads}", fmt(dms, ".1f"), fmt(tms, ".1f"),
                      fmt(ratio, ".2f", "x"), f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else None,
                      f"{target:.1f}x" if target else "info", fmt(med(d, "mfu") and 100 * med(d, "mfu"), ".1f", "%"),
                      fmt(med(t, "mfu") and 100 * med(t, "mfu"), ".1f", "%"), mib(alloc),
                      f"{'/'.join(mib(b) for b in rss)} ({'/'.join(mib(b) for b in above)})" if rss else None])
        print(json.dumps({
            "bench": "trainer", "case": c, "param_dtype": c, "reduce_dtype": "f32", "ranks": RANKS,
            "threads_per_rank": threads, "model": vars(m), "steps": a.steps, "warmup": a.warmup,
            "dtensor_ms": dms and round(dms, 3), "torch_ms": tms and round(tms, 3),
            "ratio": ratio and round(ratio, 4), "target": target,
            "ratio_per_round": [round(r, 4) for r in per_round],
            "dtensor_ms_per_round": [round(1e3 * d[r]["step_s"], 3) for r in sorted(d)],
            "torch_ms_per_round": [round(1e3 * t[r]["step_s"], 3) for r in sorted(t)],
            "dtensor_mfu": med(d, "mfu"), "torch_mfu": med(t, "mfu"),
            "dtensor_peak_flops": med(d, "peak_flops"), "torch_peak_flops": med(t, "peak_flops"),
            "dtensor_peak_bytes": alloc, "torch_peak_rss_bytes": rss, "torch_rss_above_import_bytes": above,
            "dtensor_params": dt_params, "torch_params": torch_params,
            "loss_step1": loss1, "rounds": min((len(v) for v in (d, t) if v), default=0)}), flush=True)
        # Both start from weights of std 0.02: the first loss is about ln(vocab) on both sides.
        firsts = [x for v in loss1.values() for x in v if x is not None]
        notes.append(f"  {c}: loss at step 1: dtensor {', '.join(f'{x:.4f}' for x in loss1['dtensor'] if x)}; torch "
                     f"{', '.join(f'{x:.4f}' for x in loss1['torch'] if x)} (ln(vocab) = {ln_vocab:.4f})")
        if any(abs(x - ln_vocab) > 0.1 * ln_vocab for x in firsts):
            notes.append(f"  {c}: a loss at step 1 is more than 10% from ln(vocab): the two sides do not train the "
                         "same thing")
        if dt_params or torch_params:
            same = "equal" if dt_params == torch_params else "DIFFERENT"
            notes.append(f"  {c}: parameters: dtensor {dt_params}, torch {torch_params} ({same})")
    log(f"\nbench/trainer: ms/step, the median over rounds of each run's median after {a.warmup} warm-up step(s); "
        "'rounds': the range of the per-round ratios; MFU: each side's against its own measured f32 GEMM peak (bf16 "
        "too); 'dt peak': dttrain's allocator peak (largest rank); torch: peak RSS per rank (rank 0/rank 1), in "
        "brackets the part above the RSS before the model was built (import torch, the process group)")
    return benchlib.report("bench/trainer", headers, table, met, total, failed, notes)


if __name__ == "__main__":
    sys.exit(main())
