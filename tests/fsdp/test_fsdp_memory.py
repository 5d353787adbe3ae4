#!/usr/bin/env python3
"""FSDP's memory on real processes (examples/train_gpt --fsdp under dtrun): the accounting's figures against
references computed here from the model's shapes, and the peak against the theory (Note [FSDP memory theory]).

usage: test_fsdp_memory.py DTRUN TRAIN_GPT

Checked per rank: the parameter shards are exactly torch.chunk's rows of every parameter (no padding), the optimizer
state is twice that (AdamW), at most the root's group and two blocks are gathered at once (and at least the root and
one block were), and the measured peak is at most 1.1x the theory the accounting prints.
"""
import json
import subprocess
import sys

NPROC, LAYERS, DIM, HIDDEN, VOCAB = 2, 4, 64, 200, 97


def chunk_rows(n, k, r):
    c = -(-n // k)
    return max(0, min(n, (r + 1) * c) - min(n, r * c))


def main():
    dtrun, train = sys.argv[1], sys.argv[2]
    cmd = [dtrun, "--nproc-per-node", str(NPROC), "--timeout", "300", train, "--dp", str(NPROC), "--fsdp", "--json",
           "--steps", "3", "--layers", str(LAYERS), "--dim", str(DIM), "--hidden", str(HIDDEN), "--vocab", str(VOCAB),
           "--heads", "4", "--seq", "16", "--batch", "4", "--threads", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    mem = [json.loads(l)["memory"] for l in out.stdout.splitlines() if l.startswith('{"memory"')]
    if len(mem) != 1 or len(mem[0]) != NPROC:
        sys.exit(f"expected one memory line with {NPROC} ranks:\n{out.stdout}")
    # The GPT's parameters (nn/gpt.h, untied head): (rows, row elements), f32.
    block = [(DIM, DIM)] * 4 + [(HIDDEN, DIM), (DIM, HIDDEN), (HIDDEN, DIM)] + [(DIM, 1)] * 2
    root = [(VOCAB, DIM), (DIM, 1), (VOCAB, DIM)]
    block_bytes = sum(r * c for r, c in block) * 4
    root_bytes = sum(r * c for r, c in root) * 4
    failures = []
    for m in mem[0]:
        r = m["rank"]
        shards = sum(chunk_rows(n, NPROC, r) * c for n, c in root + block * LAYERS) * 4
        if m["params_bytes"] != shards:
            failures.append(f"rank {r}: parameters hold {m['params_bytes']} bytes, their torch.chunk rows {shards}")
        if m["optimizer_bytes"] != 2 * shards:
            failures.append(f"rank {r}: AdamW state {m['optimizer_bytes']} bytes, expected {2 * shards}")
        if not root_bytes + block_bytes <= m["gathered_peak_bytes"] <= root_bytes + 2 * block_bytes:
            failures.append(f"rank {r}: gathered parameters peaked at {m['gathered_peak_bytes']} bytes, expected "
                            f"between the root and one block ({root_bytes + block_bytes}) and the root and two blocks "
                            f"({root_bytes + 2 * block_bytes})")
        ratio = m["peak_bytes"] / m["theory_bytes"]
        if ratio > 1.1:
            failures.append(f"rank {r}: peak {m['peak_bytes']} bytes is {ratio:.2f}x the theory {m['theory_bytes']}")
        print(f"rank {r}: peak {m['peak_bytes'] / 2**20:.1f} MiB = {ratio:.2f}x theory; shards {shards} bytes; "
              f"gathered peak {m['gathered_peak_bytes']} bytes (root + 1 block {root_bytes + block_bytes}, "
              f"+ 2 blocks {root_bytes + 2 * block_bytes})")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
