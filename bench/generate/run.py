#!/usr/bin/python3
"""bench/generate: greedy decoding of a Llama of 57 M parameters (dim 512, 8 layers, 8 query / 2 key-value heads,
vocabulary 32000, f32, random weights made once by transformers into BUILD_DIR/bench-data/llama-57m), a prompt of
32 tokens and 64 new ones, batch 1:

  1     dtensor (examples/generate, one process, one thread) against transformers' generate (eager, KV cache, one
        thread).                                          target: dtensor's decode tokens/s >= transformers'
  tp2   dtensor tensor-parallel over 2 processes (one thread each) against dtensor's one process on one thread: the
        per-token latency.                                target: tp2 / one process <= 0.6x

Both sides warm up with a generation of 4 tokens first. Both produce the same tokens (checked: a run whose tokens differ from transformers' fails). Each round runs the three
in an order that alternates between rounds; a row reports the median over rounds and every round.
Usage: run.py BUILD_DIR [--rounds 5] [--steps 64] [--cases 1,tp2]
Prints the table on stderr and one JSON line per case on stdout.
"""
import json
import os
import random
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import benchlib  # noqa: E402
from benchlib import log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    ap = benchlib.driver_parser(__doc__, "DT_BENCH_GENERATE", steps=64, cases=["1", "tp2"], rounds=5)
    a = benchlib.parse_driver_args(ap, argv)
    python = benchlib.ensure_venv(benchlib.venv_dir(a.build), "bench/generate")
    subprocess.run([python, "-c", "import transformers"], check=True)
    model = os.path.join(a.build, "bench-data", "llama-57m")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        log(f"bench/generate: writing the model to {model}")
        subprocess.run([python, os.path.join(HERE, "torch_generate.py"), "--make", model], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = random.Random(1)
    prompt = ",".join(str(rng.randrange(2, 32000)) for _ in range(32))
    gen = os.path.join(a.build, "examples", "generate")
    dtrun = os.path.join(a.build, "tools", "dtrun")
    have_dt = benchlib.programs_built(a.build, ["examples/generate"], "bench/generate")
    steps = str(a.steps)
    dt_args = ["--model", model, "--prompt", prompt, "--max-new-tokens", steps, "--threads", "1", "--stop", "-1",
               "--warmup", "4", "--json"]
    sides = [("transformers", lambda: [python, os.path.join(HERE, "torch_generate.py"), "--model", model, "--prompt",
                                       prompt, "--max-new-tokens", steps, "--threads", "1"])]
    if have_dt and not a.torch_only:
        sides.append(("dtensor", lambda: [gen, *dt_args]))
        if "tp2" in a.cases:
            sides.append(("dtensor tp2", lambda: [dtrun, "--nproc-per-node", "2", gen, "--tp", "2", *dt_args]))
    results, failed = benchlib.run_rounds([("decode", sides)], a.rounds, "bench/generate")

    def runs(impl):
        return [rows[-1] for _, rows in results.get(("decode", impl), [])]

    reference = runs("transformers")
    want = reference[0]["tokens"] if reference else None
    for impl in ("dtensor", "dtensor tp2"):
        for r in runs(impl):
            if r["tokens"] != want:
                log(f"bench/generate: {impl} generated {r['tokens']}, transformers {want}")
                failed += 1
    rate = {impl: [r["decode_tokens_per_s"] for r in runs(impl)] for impl in ("transformers", "dtensor", "dtensor tp2")}
    ttft = {impl: [r["time_to_first_token_s"] for r in runs(impl)] for impl in rate}
    med = {impl: statistics.median(v) if v else None for impl, v in rate.items()}
    headers = ["case", "dtensor tok/s", "reference tok/s", "ratio", "target", "TTFT ms dt / ref"]
    rows, met, total, notes = [], 0, 0, []

    def ms(v):
        return f"{1e3 * statistics.median(v):.1f}" if v else "-"

    if "1" in a.cases:
        ratio = med["dtensor"] / med["transformers"] if med["dtensor"] and med["transformers"] else None
        rows.append(["1 process, 1 thread vs transformers", benchlib.fmt(med["dtensor"], ".1f"),
                     benchlib.fmt(med["transformers"], ".1f"), benchlib.fmt(ratio, ".2f", "x"), ">= 1.0x",
                     f"{ms(ttft['dtensor'])} / {ms(ttft['transformers'])}"])
        if ratio is not None:
            total += 1
            met += ratio >= 1.0
        print(json.dumps({"bench": "generate", "case": "1", "dtensor_tokens_per_s": med["dtensor"],
                          "transformers_tokens_per_s": med["transformers"], "ratio": ratio, "rounds": rate}))
    if "tp2" in a.cases:
        lat = med["dtensor"] / med["dtensor tp2"] if med["dtensor"] and med["dtensor tp2"] else None
        rows.append(["tp2 per-token latency vs 1 process", benchlib.fmt(med["dtensor tp2"], ".1f"),
                     benchlib.fmt(med["dtensor"], ".1f"), benchlib.fmt(lat, ".2f", "x"), "<= 0.6x",
                     f"{ms(ttft['dtensor tp2'])} / {ms(ttft['dtensor'])}"])
        if lat is not None:
            total += 1
            met += lat <= 0.6
        print(json.dumps({"bench": "generate", "case": "tp2", "tp2_tokens_per_s": med["dtensor tp2"],
                          "one_process_tokens_per_s": med["dtensor"], "latency_ratio": lat, "rounds": rate}))
    notes.append("rounds (decode tokens/s): " + "; ".join(
        f"{impl} " + ", ".join(f"{x:.1f}" for x in v) for impl, v in rate.items() if v))
    return benchlib.report("bench/generate", headers, rows, met, total, failed, notes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
