#!/usr/bin/env python3
"""A checkpoint written before the fused attention and the Llama-family options (train_gpt at commit 78217d5, step 2
of a 1-layer GPT, tests/data/gpt_checkpoint_78217d5) still loads, strictly, and training resumed from it gives the
losses that commit printed for steps 3 and 4.

Usage: resume_old_checkpoint.py TRAIN_GPT DATA_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# Printed by train_gpt of 78217d5 with the arguments below (--save-every 2, run to step 4).
OLD_LOSSES = {3: 3.3844888210296631, 4: 3.3867228031158447}
ARGS = ["--layers", "1", "--dim", "16", "--heads", "2", "--vocab", "29", "--seq", "12", "--batch", "2", "--steps", "4",
        "--threads", "1", "--json", "--resume"]


def main():
    train_gpt, data = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(data, os.path.join(tmp, "ckpt"))
        r = subprocess.run([train_gpt, *ARGS, "--save-dir", os.path.join(tmp, "ckpt")], capture_output=True, text=True,
                           timeout=120)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        return 1
    got = {}
    for line in r.stdout.splitlines():
        if line.startswith('{"step"'):
            row = json.loads(line)
            got[row["step"]] = row["loss"]
    ok = sorted(got) == [3, 4] and all(abs(got[s] - OLD_LOSSES[s]) <= 1e-6 * OLD_LOSSES[s] for s in OLD_LOSSES)
    print(f"resumed from the 78217d5 checkpoint: losses {got}, then {OLD_LOSSES}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
