#!/usr/bin/env python3
"""The training part of ./dev demo (examples/demo.sh), from train_gpt's --json lines (stdlib only).

  demo_report.py steps < run.jsonl        one readable line per step as the lines arrive, then the FSDP summary
  demo_report.py compare ONE.jsonl MOVED.jsonl...
                                          the losses of one process against those of the moved job (its runs'
                                          files in order), step by step, at full precision
  demo_report.py compare-labelled LABEL ONE.jsonl OTHER.jsonl
                                          the same for another run, its column and closing line named LABEL
  demo_report.py compare-elastic ONE.jsonl ELASTIC.jsonl
                                          the same for an elastic job's lines (a step run again after a restart
                                          replaces the lost one)
  demo_report.py finetune LOG.jsonl       the validation losses of a dttrain log; exits 1 unless the last is below
                                          the first

train_gpt --json prints each loss with %.17g, which round-trips the double: the comparison reads the values the
runs computed, not their 5-decimal display (which would hide differences below 5e-6).
"""
import json
import sys

MIB = 1024.0 * 1024.0
LIMIT = 1e-4  # the moved job may differ from one process by at most this (relative), at any step


def records(lines):
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)


def steps():
    for r in records(sys.stdin):
        if "step" in r:
            print(f"step {r['step']:4d}  loss {r['loss']:.5f}  {r['tokens_per_s']:9.0f} tokens/s  "
                  f"peak {r['peak_bytes'] / MIB:.1f} MiB per rank", flush=True)
        elif "comm" in r:
            c = r["comm"]
            print(f"fsdp: {c['all_gathers']} all-gathers, {c['reduce_scatters']} reduce-scatters, "
                  f"{c['all_reduces']} all-reduces, {c['bytes'] / MIB:.1f} MiB sent per rank; "
                  f"{100 * c['hidden_share']:.0f}% of the collectives' time hidden behind compute", flush=True)


def losses(paths):
    out = {}
    for path in paths:
        with open(path) as f:
            for r in records(f):
                if "step" in r:
                    if r["step"] in out:
                        sys.exit(f"demo: step {r['step']} appears twice in {', '.join(paths)}")
                    out[r["step"]] = r["loss"]
    return out


def compare_elastic(one_path, elastic_path):
    """An elastic job's JSON lines (Note [Resize policy]): a step run again after a restart replaces the lost one."""
    a, b, twice = losses([one_path]), {}, set()
    with open(elastic_path) as f:
        for r in records(f):
            if "step" in r:
                if r["step"] in b:
                    twice.add(r["step"])
                b[r["step"]] = r["loss"]
    if not a or a.keys() != b.keys():
        sys.exit(f"demo: the runs printed different steps: {sorted(a)} and {sorted(b)}")
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
    print(f"demo: steps {', '.join(map(str, sorted(twice))) or 'none'} ran again after the restart (from the newest "
          f"complete checkpoint); every step's loss matches one process to "
          f"{'0 (bit for bit)' if worst == 0 else f'{worst:.1e}'}")
    if worst > LIMIT:
        sys.exit(f"demo: the elastic job differs from one process by {worst:.1e} (more than {LIMIT:.0e})")


def compare(one_path, moved_paths, label="FSDP 2, then FSDP + TP 2x2"):
    a, b = losses([one_path]), losses(moved_paths)
    if not a or a.keys() != b.keys():
        sys.exit(f"demo: the runs printed different steps: {sorted(a)} and {sorted(b)}")
    print(f"step   1 process   {label:<28} relative difference (full precision)")
    worst = 0.0
    for s in sorted(a):
        rel = abs(a[s] - b[s]) / abs(a[s])
        worst = max(worst, rel)
        print(f"{s:4d}   {a[s]:.5f}     {b[s]:.5f}                      {rel:.1e}")
    if worst > LIMIT:
        sys.exit(f"demo: the moved job differs from one process by {worst:.1e} (more than {LIMIT:.0e})")
    figure = "0 (bit for bit)" if worst == 0 else f"{worst:.1e}"
    what = ("FSDP on 2 processes, then FSDP + TP on the 2x2 mesh from its checkpoint," if label.startswith("FSDP 2")
            else label)
    print(f"demo: {what} matches one process to {figure} at every step (the largest relative difference of the "
          "losses)")


def finetune(path):
    val = [r for r in records(open(path)) if "val_loss" in r]
    if len(val) < 2:
        sys.exit(f"demo: {path} holds {len(val)} validation losses; the fine-tune needs two to compare")
    trail = " -> ".join(f"{r['val_loss']:.4f} (step {r['step']})" for r in val)
    if not val[-1]["val_loss"] < val[0]["val_loss"]:
        sys.exit(f"demo: the validation loss did not fall: {trail}")
    print(f"demo: the fine-tune's validation loss falls: {trail}")


def main():
    if sys.argv[1:2] == ["steps"] and len(sys.argv) == 2:
        steps()
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) >= 4:
        compare(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["compare-labelled"] and len(sys.argv) == 5:
        compare(sys.argv[3], [sys.argv[4]], label=sys.argv[2])
    elif sys.argv[1:2] == ["compare-elastic"] and len(sys.argv) == 4:
        compare_elastic(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["finetune"] and len(sys.argv) == 3:
        finetune(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
