#!/usr/bin/env python3
"""tools/prepare_tokens.py: text files -> a token dataset that decodes back to the text (its own byte-level BPE and
a given tokenizer.json), a header train/token_dataset.h reads, and the King James Bible from Debian's bible-kjv (when
the `bible` program is installed) training a model whose validation loss falls. Skips (77) without `tokenizers`.
Usage: prepare_tokens_test.py PREPARE_TOKENS DTTRAIN
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from py_venv import reexec_in_venv  # noqa: E402

reexec_in_venv()
try:
    from tokenizers import Tokenizer
except ImportError:
    print("skipped: the tokenizers package is not importable (./dev deps installs it)")
    sys.exit(77)

PREPARE, DTTRAIN = sys.argv[1:3]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def read_ids(stem):
    h = json.load(open(stem + ".json"))
    width = 2 if h["dtype"] == "uint16" else 4
    data = open(stem + ".bin", "rb").read()
    return h, [int.from_bytes(data[i:i + width], "little") for i in range(0, len(data), width)]


with tempfile.TemporaryDirectory() as tmp:
    texts = ["It was the best of times, it was the worst of times.\nÉté, naïve café — ünïcödé.\n" * 50,
             "Another file, another story.\n" * 30]
    files = []
    for i, t in enumerate(texts):
        files.append(os.path.join(tmp, f"t{i}.txt"))
        open(files[-1], "w", encoding="utf-8").write(t)
    stem = os.path.join(tmp, "out", "c")
    r = subprocess.run([sys.executable, PREPARE, *files, "--out", stem, "--vocab-size", "300"], capture_output=True,
                       text=True)
    check(r.returncode == 0, f"prepare_tokens ran ({r.stderr.strip()[-200:]})")
    h, ids = read_ids(stem)
    tok = Tokenizer.from_file(stem + ".tokenizer.json")
    eos = h["eos_token_id"]
    parts = [[]]
    for i in ids:
        if i == eos:
            parts.append([])
        else:
            parts[-1].append(i)
    check(h["tokens"] == len(ids) and h["vocab_size"] == tok.get_vocab_size() and max(ids) < h["vocab_size"],
          f"header: {h['tokens']} tokens, vocabulary {h['vocab_size']}")
    check([tok.decode(p) for p in parts[:-1]] == texts, "each file decodes back to its text, then end-of-text")
    # A given tokenizer: the same ids.
    stem2 = os.path.join(tmp, "out", "c2")
    subprocess.run([sys.executable, PREPARE, *files, "--out", stem2, "--tokenizer", stem + ".tokenizer.json"],
                   check=True, capture_output=True)
    check(read_ids(stem2)[1] == ids, "with the tokenizer.json given: the same ids")
    if shutil.which("bible"):
        kjv = os.path.join(tmp, "kjv", "kjv")
        r = subprocess.run([sys.executable, PREPARE, "--kjv", "--out", kjv, "--vocab-size", "1024"],
                           capture_output=True, text=True)
        h, _ = read_ids(kjv) if r.returncode == 0 else ({"tokens": 0}, [])
        check(r.returncode == 0 and h["tokens"] > 800000, f"the King James Bible: {h['tokens']} tokens")
        log = os.path.join(tmp, "kjv.jsonl")
        cfg = os.path.join(tmp, "kjv.toml")
        open(cfg, "w").write("[data]\nval_every = 15\n")
        r = subprocess.run([DTTRAIN, cfg, "--data.path", kjv + ".bin", "--model.vocab", "1024", "--model.dim", "64",
                            "--training.steps", "30", "--training.seq", "32", "--training.global_batch", "8",
                            "--optimizer.lr", "3e-3", "--logging.log_file", log, "--training.threads", "1"],
                           capture_output=True, text=True, timeout=300)
        val = [json.loads(line)["val_loss"] for line in open(log) if "val_loss" in line] if r.returncode == 0 else []
        check(len(val) == 2 and val[1] < val[0], f"dttrain on it: validation loss {val}")
    else:
        print("note: Debian's bible program is missing: the King James corpus is not checked")
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
