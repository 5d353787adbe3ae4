#!/usr/bin/python3
"""bench/attention: causal attention forward + backward on one process, f32, q/k/v [1, 8, T, 64]:
dtensor's fused attention (nn::fused_attention), the composed one (nn::scaled_dot_product_attention: scores, mask,
softmax, @ v) and PyTorch's F.scaled_dot_product_attention(is_causal=True) on the CPU (its flash-attention kernel).

Usage: run.py BUILD_DIR [--rounds 5] [--steps 6] [--warmup 1] [--cases 256,1024,4096] [--threads N] [--gqa]

Targets (issue 33): at T = 1024 fused <= 1/1.5 of composed; at every T fused <= 1.0x PyTorch; and the activation
memory of one layer (what the forward leaves for the backward, the output included) linear in T for the fused
attention, printed for all three (the composed one holds the T x T probabilities). Each round runs the three sides of
each T one after the other, in an order that alternates between rounds; a side's time is the median of its timed
iterations, a row reports the median over rounds and the ratios of those medians, and every round is listed.
--gqa uses 2 key/value heads for the 8 query heads (PyTorch: enable_gqa). Prints the table on stderr and one JSON line
per T on stdout.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    ap = benchlib.driver_parser(__doc__, "DT_BENCH_ATTENTION", steps=6, cases=["256", "1024", "4096"], rounds=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--gqa", action="store_true")
    a = benchlib.parse_driver_args(ap, argv)
    python = benchlib.ensure_venv(benchlib.venv_dir(a.build), "bench/attention")
    dt_bench = os.path.join(a.build, "bench", "attention_bench")
    have_dt = benchlib.programs_built(a.build, ["bench/attention_bench"], "bench/attention")
    kv = "2" if a.gqa else "8"
    iters = str(a.steps - a.warmup)

    def common(t):
        return ["--t", t, "--heads", "8", "--kv-heads", kv, "--head-dim", "64", "--iters", iters, "--warmup",
                str(a.warmup), "--threads", str(a.threads)]

    plans = []
    for t in a.cases:
        sides = [("torch", lambda t=t: [python, os.path.join(HERE, "torch_sdpa.py"), *common(t)])]
        if have_dt and not a.torch_only:
            sides += [(impl, lambda t=t, impl=impl: [dt_bench, "--impl", impl, *common(t)])
                      for impl in ("fused", "composed")]
        plans.append((t, sides))
    results, failed = benchlib.run_rounds(plans, a.rounds, "bench/attention")

    def medians(t, impl):
        return [r[0]["median_s"] for _, r in results.get((t, impl), [])]

    def saved(t, impl):
        runs = results.get((t, impl), [])
        return runs[-1][1][0]["saved_bytes"] if runs else None

    headers = ["T", "fused ms", "composed ms", "torch ms", "fused/composed", "fused/torch", "saved MiB f/c/t"]
    rows, met, total, notes = [], 0, 0, []
    for t in a.cases:
        m = {impl: medians(t, impl) for impl in ("fused", "composed", "torch")}
        med = {impl: statistics.median(v) if v else None for impl, v in m.items()}
        r_comp = med["fused"] / med["composed"] if med["fused"] and med["composed"] else None
        r_torch = med["fused"] / med["torch"] if med["fused"] and med["torch"] else None
        mib = [saved(t, impl) for impl in ("fused", "composed", "torch")]
        rows.append([t, benchlib.fmt(med["fused"] and med["fused"] * 1e3, ".2f"),
                     benchlib.fmt(med["composed"] and med["composed"] * 1e3, ".2f"),
                     benchlib.fmt(med["torch"] and med["torch"] * 1e3, ".2f"), benchlib.fmt(r_comp, ".2f", "x"),
                     benchlib.fmt(r_torch, ".2f", "x"),
                     "/".join("-" if b is None else f"{b / 2**20:.1f}" for b in mib)])
        if r_torch is not None:
            total += 1
            met += r_torch <= 1.0
        if t == "1024" and r_comp is not None:
            total += 1
            met += r_comp <= 1 / 1.5
        notes.append(f"T={t} rounds (ms): " + "; ".join(
            f"{impl} " + ", ".join(f"{x * 1e3:.2f}" for x in v) for impl, v in m.items() if v))
        print(json.dumps({"bench": "attention", "t": int(t), "gqa": a.gqa, "threads": a.threads,
                          "fused_s": med["fused"], "composed_s": med["composed"], "torch_s": med["torch"],
                          "fused_over_composed": r_comp, "fused_over_torch": r_torch, "saved_bytes_fused": mib[0],
                          "saved_bytes_composed": mib[1], "saved_bytes_torch": mib[2],
                          "rounds": {k: v for k, v in m.items() if v}}), flush=True)
    fused_saved = [(int(t), saved(t, "fused")) for t in a.cases if saved(t, "fused")]
    if len(fused_saved) > 1:
        per_token = [b / t for t, b in fused_saved]
        notes.append("fused activation bytes per position: " + ", ".join(f"{x:.0f}" for x in per_token) +
                     " (linear in T when these are equal)")
    return benchlib.report("bench/attention", headers, rows, met, total, failed, notes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
