#!/usr/bin/env python3
"""./dev demo's output survives redirection: runs examples/demo.sh with stdout and stderr into one file (as
`./dev demo > demo.log 2>&1` does) and checks the file: no NUL bytes, every section header of the script once and in
the script's order, every training step's line once in its section, the closing comparison, and the fine-tune
(dttrain's step lines, its validation losses falling, the plot and the traced timeline drawn), unless the demo said it skipped it for want
of the venv's tokenizers and matplotlib, and the PyTorch part (a row per step and the closing line), unless it was skipped
for want of torch.

The headers are read from demo.sh itself (its `echo "== ..."` lines, up to the first expansion), so a section added
there is checked too. The demo runs as it is (its 12 training steps take a few seconds), only without building
(DT_DEMO_BUILD=0: meson built its targets first); DT_DEMO_TRAIN_STEPS, when set, is passed on to it.

Usage: demo_output_test.py DEMO_SH BUILD_DIR
"""
import os
import re
import subprocess
import sys
import tempfile


def script_headers(demo_sh):
    """The fixed start of each section header the script echoes, in order."""
    out = []
    for line in open(demo_sh, encoding="utf-8"):
        m = re.match(r'\s*echo "(== .*)"\s*$', line)
        if m:
            out.append(m.group(1).split("$")[0])
    return out


def step_lines(section):
    return [int(m.group(1)) for m in re.finditer(r"^step\s+(\d+)\s+loss\s+[0-9.]+\s", section, re.M)]


def main(demo_sh, build):
    steps = int(os.environ.get("DT_DEMO_TRAIN_STEPS", "12"))  # demo.sh's default
    os.environ["DT_DEMO_BUILD"] = "0"
    half = steps // 2
    problems = []
    with tempfile.TemporaryDirectory(prefix="dtensor_demo_test_") as tmp:
        log = os.path.join(tmp, "demo.log")
        with open(log, "wb") as f:  # one file for both streams, as the shell's `> demo.log 2>&1`
            rc = subprocess.run(["bash", demo_sh, build], stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                timeout=600).returncode
        data = open(log, "rb").read()
    text = data.decode("utf-8", errors="replace")
    if rc != 0:
        problems.append(f"demo.sh exited with {rc}")
    nuls = data.count(b"\0")
    if nuls:
        problems.append(f"the log holds {nuls} NUL bytes")

    expected = script_headers(demo_sh)
    if len(expected) < 6:
        problems.append(f"found only {len(expected)} section headers in {demo_sh}")
    got = [line for line in text.splitlines() if line.startswith("== ")]
    if len(got) != len(expected) or any(not g.startswith(e) for g, e in zip(got, expected)):
        problems.append("the section headers differ from the script's, in order:\n  expected (starts): " +
                        "\n                     ".join(expected) + "\n  got: " + "\n       ".join(got))
    else:
        # Each training section prints each of its steps once; the comparison table lists every step once.
        starts = [text.index(g) for g in got] + [len(text)]
        sections = {e: text[starts[i]:starts[i + 1]] for i, e in enumerate(expected)}
        wanted = {"== training a GPT, one process": list(range(1, steps + 1)),
                  "== FSDP on 2 processes": list(range(1, half + 1)),
                  "== resumed from the newest checkpoint": list(range(half + 1, steps + 1))}
        for head, want in wanted.items():
            section = next((s for e, s in sections.items() if e.startswith(head)), None)
            if section is None:
                problems.append(f"no section starting {head!r}")
            elif step_lines(section) != want:
                problems.append(f"section {head!r}: step lines {step_lines(section)}, expected {want}")
        table = next(s for e, s in sections.items() if e.startswith("== the losses"))
        gen = next(s for e, s in sections.items() if e.startswith("== generation"))
        tune = next(s for e, s in sections.items() if e.startswith("== fine-tuning"))
        tune_steps = int(os.environ.get("DT_DEMO_FINETUNE_STEPS", "30"))
        if "   skipped: " in tune:
            print("note: the demo skipped its fine-tune (no tokenizers or matplotlib in the venv): not checked")
        else:
            if step_lines(tune) != list(range(1, tune_steps + 1)):
                problems.append(f"the fine-tune's step lines {step_lines(tune)}, expected 1..{tune_steps}")
            if not re.search(r"^demo: the fine-tune's validation loss falls: ", tune, re.M):
                problems.append("no line 'demo: the fine-tune's validation loss falls'")
            plot = re.search(r"^dttrain plot: wrote (\S+)", tune, re.M)
            if not plot or not os.path.getsize(plot.group(1)) > 1000:
                problems.append("the fine-tune's plot was not written")
            timeline = re.search(r"^dttrace plot: wrote (\S+)", tune, re.M)
            if not timeline or not os.path.getsize(timeline.group(1)) > 1000:
                problems.append("the fine-tune's timeline was not drawn")
            if not re.search(r"^checkpoint: step \d+ -> ", tune, re.M):
                problems.append("the fine-tune wrote no checkpoint")
        front = next((s for e, s in sections.items() if e.startswith("== PyTorch's FSDP2 API")), "")
        front_steps = int(os.environ.get("DT_DEMO_TORCH_STEPS", "10"))
        if "   skipped: " in front:
            print("note: the demo skipped its PyTorch part (no torch in the venv): not checked")
        else:
            got_rows = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$",
                                                             front, re.M)]
            if got_rows != list(range(1, front_steps + 1)):
                problems.append(f"the PyTorch part lists steps {got_rows}, expected 1..{front_steps}")
            if not re.search(r"^demo: dtensor\.torch trains the script as PyTorch FSDP2 does", front, re.M):
                problems.append("no line 'demo: dtensor.torch trains the script as PyTorch FSDP2 does'")
        if len(re.findall(r"^  continuation: \[\d+(,\d+)*\]$", gen, re.M)) != 2 or "time to first token" not in gen:
            problems.append("the generation section shows no two continuations and time to first token")
        rows = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.e+-]+$", table, re.M)]
        if rows != list(range(1, steps + 1)):
            problems.append(f"the comparison table lists steps {rows}, expected 1..{steps}")
    m = re.search(r"^demo: .* matches one process to (\S+)", text, re.M)
    if not m:
        problems.append("no closing line 'demo: ... matches one process to ...'")
    elif m.group(1) != "0" and not 0 < float(m.group(1)) <= 1e-4:
        problems.append(f"the closing figure {m.group(1)} is not a relative difference in (0, 1e-4]")

    if problems:
        print("--- the demo's log ---\n" + text + "--- end of the log ---")
        for p in problems:
            print("FAIL:", p)
        return 1
    print(f"demo output: {len(got)} sections in order, {len(text.splitlines())} lines, no NUL byte; "
          f"closing figure {m.group(1)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
