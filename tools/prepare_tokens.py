#!/usr/bin/env python3
"""Text files -> a token dataset (train/token_dataset.h): OUT.bin (uint16 or uint32 ids) and OUT.json, with the
Hugging Face `tokenizers` package: a given tokenizer.json, or a byte-level BPE trained on the corpus itself (saved as
OUT.tokenizer.json beside the dataset). Each file's text ends with the end-of-text token. A progress bar on stderr.

  tools/prepare_tokens.py corpus.txt --out data/corpus --vocab-size 4096             # train a BPE on the corpus
  tools/prepare_tokens.py *.txt --out data/corpus --tokenizer llama/tokenizer.json    # a model's own tokenizer
  tools/prepare_tokens.py --kjv --out data/kjv --vocab-size 4096   # the King James Bible from Debian's bible-kjv

--kjv reads the whole King James Version (public domain: its copyright expired, see
/usr/share/doc/bible-kjv-text/copyright) through Debian's `bible` program (packages bible-kjv, bible-kjv-text), so
the demo and the tests have a real corpus offline. Needs `tokenizers` (./dev deps puts it in build/py-venv).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

EOS = "<|endoftext|>"


def progress(done, total, start, what):
    frac = done / total if total else 1.0
    bar = "#" * int(30 * frac)
    rate = done / max(time.time() - start, 1e-9) / 1e6
    sys.stderr.write(f"\r{what} [{bar:<30}] {100 * frac:5.1f}% ({done / 1e6:.1f} of {total / 1e6:.1f} MB, "
                     f"{rate:.1f} MB/s)")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def kjv_text(folder):
    """The King James Bible as one text file (Debian's bible program), verse references removed."""
    bible = shutil.which("bible")
    if bible is None:
        sys.exit("prepare_tokens: --kjv needs Debian's bible-kjv and bible-kjv-text packages (./dev deps installs "
                 "them)")
    out = subprocess.run([bible, "-f", "Genesis 1:1-Revelation 22:21"], capture_output=True, text=True, check=True)
    lines = []
    for line in out.stdout.splitlines():
        # "Ge1:1 In the beginning ..." -> "In the beginning ..."; chapter headings and blank lines are dropped.
        head, _, rest = line.partition(" ")
        if rest and ":" in head and head[-1].isdigit():
            lines.append(rest.strip())
    path = os.path.join(folder, "kjv.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="UTF-8 text files")
    ap.add_argument("--out", required=True, help="the dataset's stem: OUT.bin and OUT.json")
    ap.add_argument("--tokenizer", help="a tokenizer.json to use (else a byte-level BPE is trained)")
    ap.add_argument("--vocab-size", type=int, default=4096, help="of the trained BPE (default 4096)")
    ap.add_argument("--kjv", action="store_true", help="the King James Bible from Debian's bible-kjv as the text")
    a = ap.parse_args()
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        sys.exit("prepare_tokens: the `tokenizers` package is not importable by " + sys.executable +
                 " (./dev deps installs it into build/py-venv)")
    with tempfile.TemporaryDirectory() as tmp:
        files = list(a.files) + ([kjv_text(tmp)] if a.kjv else [])
        if not files:
            sys.exit("prepare_tokens: no text files given (and no --kjv)")
        for f in files:
            if not os.path.isfile(f):
                sys.exit(f"prepare_tokens: {f} is not a file")
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        if a.tokenizer:
            tok = Tokenizer.from_file(a.tokenizer)
            tok_name = os.path.abspath(a.tokenizer)
        else:
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, special_tokens=[EOS],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
            sys.stderr.write(f"prepare_tokens: training a byte-level BPE of {a.vocab_size} tokens on "
                             f"{len(files)} file(s)\n")
            tok.train(files, trainer)
            tok_name = a.out + ".tokenizer.json"
            tok.save(tok_name)
        vocab = tok.get_vocab_size()
        eos = tok.token_to_id(EOS)
        width = 2 if vocab <= 65536 else 4
        total = sum(os.path.getsize(f) for f in files)
        done, start, count = 0, time.time(), 0
        tmp_bin = a.out + ".bin.tmp"
        with open(tmp_bin, "wb") as out:
            for f in files:
                with open(f, encoding="utf-8") as src:
                    while True:
                        lines = src.readlines(1 << 20)  # about 1 MB at a time
                        if not lines:
                            break
                        chunk = "".join(lines)
                        ids = [i for enc in tok.encode_batch(lines) for i in enc.ids]
                        out.write(b"".join(int(i).to_bytes(width, "little") for i in ids))
                        count += len(ids)
                        done += len(chunk.encode("utf-8"))
                        progress(min(done, total), total, start, "prepare_tokens: tokenizing")
                if eos is not None:
                    out.write(int(eos).to_bytes(width, "little"))
                    count += 1
        os.replace(tmp_bin, a.out + ".bin")
        header = {"format": "dtensor-tokens", "version": 1, "dtype": "uint16" if width == 2 else "uint32",
                  "tokens": count, "vocab_size": vocab, "tokenizer": os.path.basename(tok_name) if not a.tokenizer
                  else tok_name, "eos_token_id": eos,
                  "source": "King James Bible (Debian bible-kjv-text)" if a.kjv else ", ".join(a.files)}
        with open(a.out + ".json.tmp", "w") as f:
            json.dump(header, f, indent=1)
        os.replace(a.out + ".json.tmp", a.out + ".json")
    print(f"prepare_tokens: {count} tokens (vocabulary {vocab}, {width * 8}-bit ids) in {a.out}.bin, header "
          f"{a.out}.json")


if __name__ == "__main__":
    main()
