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
  demo_report.py torch-front DT.jsonl TORCH.jsonl
                                          bench/torch_front/train_step.py's lines of one PyTorch script on
                                          dtensor.torch and on PyTorch FSDP2: losses and step times side by side;
                                          exits 1 when a loss differs by more than 1e-5 (relative)

train_gpt --json prints each loss with %.17g, which round-trips the double: the comparison reads the values the
runs computed, not their 5-decimal display (which would hide differences below 5e-6).
"""
import json
import statistics
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


def torch_front(dt_path, torch_path):
    """The same torch.nn script sharded by dtensor.torch and by PyTorch FSDP2 (losses printed to 8 decimals)."""
    runs = []
    for path in dt_path, torch_path:
        with open(path) as f:
            runs.append({r["step"]: r for r in records(f) if "step" in r})
    a, b = runs
    if not a or a.keys() != b.keys():
        sys.exit(f"demo: the runs printed different steps: {sorted(a)} and {sorted(b)}")
    print("step   dtensor.torch   PyTorch FSDP2   step ms: dtensor.torch   FSDP2")
    worst = 0.0
    for s in sorted(a):
        x, y = a[s], b[s]
        worst = max(worst, abs(x["loss"] - y["loss"]) / abs(y["loss"]))
        print(f"{s:4d}   {x['loss']:.8f}      {y['loss']:.8f}      {x['step_s'] * 1e3:8.1f}           "
              f"{y['step_s'] * 1e3:8.1f}")
    if worst > 1e-5:
        sys.exit(f"demo: dtensor.torch's losses differ from PyTorch FSDP2's by {worst:.1e} (more than 1e-5)")
    later = sorted(a)[1:] or sorted(a)  # the first step includes the lazy setup on both sides
    dt, pt = (statistics.median(run[s]["step_s"] for s in later) * 1e3 for run in (a, b))
    print(f"demo: dtensor.torch trains the script as PyTorch FSDP2 does, losses equal to "
          f"{'8 decimals' if worst == 0 else f'{worst:.1e}'} at every step; a step takes {dt:.1f} ms against "
          f"{pt:.1f} ms (medians after the first step)")


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
    elif sys.argv[1:2] == ["torch-front"] and len(sys.argv) == 4:
        torch_front(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
