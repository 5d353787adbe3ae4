#!/usr/bin/env python3
"""examples/train_gpt on one process and on real processes with tp = 2, tp = 4 and dp x tp = 2 x 2 (dtrun, UCX):
the losses of the first 20 steps must agree with the one-process run within 1e-4 relative, and every run must print
one JSON line per step with the fields the issue names.

Usage: train_gpt_losses.py DTRUN TRAIN_GPT
"""
import json
import subprocess
import sys

STEPS = 20
COMMON = ["--steps", str(STEPS), "--json", "--layers", "2", "--dim", "64", "--heads", "4", "--vocab", "96",
          "--seq", "16", "--batch", "4", "--threads", "1"]


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        missing = {"step", "loss", "tokens_per_s", "peak_bytes"} - set(r)
        if missing:
            sys.exit(f"{' '.join(cmd)}: a JSON line lacks {sorted(missing)}: {r}")
    if [r["step"] for r in rows] != list(range(1, STEPS + 1)):
        sys.exit(f"{' '.join(cmd)}: expected steps 1..{STEPS}, got {[r['step'] for r in rows]}")
    return [r["loss"] for r in rows]


def main():
    dtrun, train = sys.argv[1], sys.argv[2]
    ref = run([train] + COMMON)
    if not ref[-1] < ref[0]:
        sys.exit(f"one process: the loss did not go down in {STEPS} steps: {ref}")
    worst = 0.0
    for name, n, flags in [("tp 2", 2, ["--tp", "2"]), ("tp 4", 4, ["--tp", "4"]),
                           ("dp 2 x tp 2", 4, ["--dp", "2", "--tp", "2"]),
                           ("tp 2 sequence parallel", 2, ["--tp", "2", "--sequence-parallel"])]:
        got = run([dtrun, "--nproc-per-node", str(n), "--timeout", "120", train] + flags + COMMON)
        for step, (a, b) in enumerate(zip(got, ref), start=1):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            if rel > 1e-4:
                sys.exit(f"{name}: step {step} loss {a} differs from one process {b} (relative {rel:.2e})")
        print(f"{name}: {STEPS} losses agree with one process (largest relative difference so far {worst:.1e})")
    print(f"one process: loss {ref[0]:.4f} -> {ref[-1]:.4f}")


if __name__ == "__main__":
    main()
