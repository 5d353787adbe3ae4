#!/usr/bin/env python3
"""dttrain plot: draws a training log (dttrain's logging.log_file, JSON lines) as a PNG: the training and validation
loss, the learning rate and the tokens/s against the step, one panel each.

Usage: plot_training.py LOG.jsonl [--out PLOT.png]   (default: the log's name with .png)
Needs matplotlib (./dev deps installs it into the build folder's py-venv: run this with that venv's python)."""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("dttrain plot: matplotlib is not installed for this python (" + sys.executable +
                 "); ./dev deps puts it in build/py-venv")
    steps, val = [], []
    with open(a.log) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"dttrain plot: {a.log}:{n}: not a JSON line ({e})")
            (val if "val_loss" in row else steps).append(row)
    if not steps:
        sys.exit(f"dttrain plot: {a.log} holds no step lines")
    out = a.out or os.path.splitext(a.log)[0] + ".png"
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    x = [r["step"] for r in steps]
    axes[0].plot(x, [r["loss"] for r in steps], label="train")
    if val:
        axes[0].plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    axes[1].plot(x, [r["lr"] for r in steps])
    axes[1].set_ylabel("learning rate")
    axes[2].plot(x, [r["tokens_per_s"] for r in steps])
    axes[2].set_ylabel("tokens/s")
    axes[2].set_xlabel("step")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(os.path.basename(a.log))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"dttrain plot: wrote {out} ({len(steps)} steps, {len(val)} validations)")


if __name__ == "__main__":
    main()
