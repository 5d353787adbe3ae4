#!/usr/bin/env python3
"""dttrain end to end, on a token dataset written here (a learnable pattern):

- gradient accumulation: one big batch on 1 process, 4 micro-batches over FSDP on 2 processes and 2 micro-batches
  over FSDP + TP on 2 x 2 give the same losses step by step (f32: 1e-6 relative);
- a resume at another world size (FSDP on 2, then tp 2 on 2 from its checkpoint) continues with the losses of the
  run that did not stop;
- SIGTERM after a step: a checkpoint, exit 0, and the resume continues;
- elastic: killed on 2 ranks under dtrun --max-restarts, the job goes on by itself on 1 with the same losses;
- the log file, validation lines, and the plot (when matplotlib is importable);
- bad input before any training: an unknown key, a wrong type, a truncated token file, a vocabulary larger than the
  model's.
Usage: dttrain_test.py DTRUN DTTRAIN
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from py_venv import reexec_in_venv  # noqa: E402

reexec_in_venv()  # matplotlib for the plot, when the py-venv has it
DTRUN, DTTRAIN = sys.argv[1:3]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def write_dataset(stem, n, vocab, truncate=False):
    ids, t = [], 1
    for i in range(n):  # t[i+1] = (5 t[i] + 3) mod vocab, restarted every 97 tokens
        t = (i * 7) % vocab if i % 97 == 0 else (5 * t + 3) % vocab
        ids.append(t)
    data = b"".join(int(x).to_bytes(2, "little") for x in ids)
    with open(stem + ".bin", "wb") as f:
        f.write(data[:-3] if truncate else data)
    with open(stem + ".json", "w") as f:
        json.dump({"format": "dtensor-tokens", "version": 1, "dtype": "uint16", "tokens": n, "vocab_size": vocab,
                   "tokenizer": "", "eos_token_id": None, "source": "dttrain_test"}, f)


CONFIG = """
[model]
vocab = 61
dim = 32
layers = 2
heads = 4
kv_heads = 2
hidden = 48

[training]
steps = 4
seq = 16
global_batch = 8
seed = 3
max_norm = 1.0

[optimizer]
lr = 3e-3

[lr_schedule]
kind = "cosine"
warmup = 1

[data]
val_every = 0
"""


RUNS = [0]


def run(nproc, config, args, timeout=300):
    """Runs dttrain; the result's .losses are the full-precision losses of its JSON log, by step."""
    RUNS[0] += 1
    log = os.path.join(os.path.dirname(config), f"run{RUNS[0]}.jsonl")
    cmd = [DTTRAIN, config, *args, "--logging.log_file", log]
    if nproc > 1:
        cmd = [DTRUN, "--nproc-per-node", str(nproc), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    r.losses = {}
    if os.path.exists(log):
        for line in open(log):
            row = json.loads(line)
            if "loss" in row:
                r.losses[row["step"]] = row["loss"]
    return r


def close(a, b, tol=1e-6):
    return sorted(a) == sorted(b) and all(abs(a[k] - b[k]) <= tol * abs(b[k]) for k in b)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "corpus")
        write_dataset(data, 20000, 61)
        config = os.path.join(tmp, "train.toml")
        with open(config, "w") as f:
            f.write(CONFIG)
        common = ["--data.path", data + ".bin", "--training.threads", "1"]

        # Gradient accumulation and data parallelism: the same update for every split of the global batch.
        base = run(1, config, common)
        want = base.losses
        check(base.returncode == 0 and sorted(want) == [1, 2, 3, 4] and want[4] < want[1],
              f"one process, one batch of 8: losses {want}")
        for nproc, extra, name in [
                (2, ["--parallelism.dp", "2", "--training.grad_accum", "4"], "FSDP on 2, 4 micro-batches"),
                (4, ["--parallelism.dp", "2", "--parallelism.tp", "2", "--training.grad_accum", "2"],
                 "FSDP + TP on 2 x 2, 2 micro-batches"),
                (2, ["--parallelism.dp", "2", "--parallelism.fsdp", "false"], "DDP on 2")]:
            r = run(nproc, config, common + extra)
            got = r.losses
            check(r.returncode == 0 and close(got, want), f"{name}: losses {got} equal one batch's (1e-6)")
            if r.returncode != 0:
                print(r.stdout[-1500:], r.stderr[-1500:])

        # A resume at another world size, with a constant lr (the schedule spans --training.steps).
        const = common + ["--lr_schedule.kind", "constant", "--training.steps", "6"]
        whole = run(1, config, const).losses
        ckpt = os.path.join(tmp, "ckpt")
        first = run(2, config, const + ["--parallelism.dp", "2", "--training.steps", "3", "--checkpoint.folder", ckpt])
        second = run(2, config, const + ["--parallelism.tp", "2", "--checkpoint.folder", ckpt])
        got = {**first.losses, **second.losses}
        check(first.returncode == 0 and second.returncode == 0 and "resumed from" in second.stdout and
              close(got, whole), f"FSDP on 2 to step 3, then tp 2 from its checkpoint: {got}, uninterrupted {whole}")

        # Elastic (Note [Resize policy]): FSDP on 2 under dtrun --nproc-per-node 1:2 --max-restarts 1; rank 1 is
        # killed in step 3's reduce-scatter; the job goes on by itself on 1 rank (dp 1, grad accum 2) from the step-2
        # checkpoint, with the uninterrupted run's losses.
        ckpt3 = os.path.join(tmp, "ckpt3")
        log3 = os.path.join(tmp, "elastic.jsonl")
        cmd = [DTRUN, "--nproc-per-node", "1:2", "--max-restarts", "1", "--failure-grace", "1", "--settle", "0.2",
               DTTRAIN, config, *const, "--parallelism.dp", "2", "--checkpoint.folder", ckpt3, "--checkpoint.every",
               "2", "--checkpoint.async", "false", "--logging.log_file", log3]
        env = dict(os.environ, DT_FAULT_INJECT="1:reduce_scatter:9:kill")  # 3 groups a step: in step 3
        e = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        losses = {}
        for line in open(log3) if os.path.exists(log3) else []:
            row = json.loads(line)
            if "loss" in row:
                losses[row["step"]] = row["loss"]  # a step run again after the restart replaces the lost one
        check(e.returncode == 0 and "generation 1 on 1 ranks: dp 1 x tp 1, grad accum 2" in e.stdout and
              "resumed from" in e.stdout and close(losses, whole),
              f"elastic: 2 ranks, then 1 after a kill: losses {losses}, uninterrupted {whole}")
        if e.returncode != 0:
            print(e.stdout[-2000:], e.stderr[-2000:])

        # SIGTERM: a checkpoint after the current step, exit 0; the resume goes on.
        ckpt2 = os.path.join(tmp, "ckpt2")
        log = os.path.join(tmp, "train.jsonl")
        p = subprocess.Popen([DTTRAIN, config, *common, "--training.steps", "500", "--checkpoint.folder", ckpt2,
                              "--logging.log_file", log, "--data.val_every", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(log) and os.path.getsize(log) > 0):
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        saved = sorted(os.listdir(ckpt2)) if os.path.exists(ckpt2) else []
        check(p.returncode == 0 and "stopped by a signal" in out and len(saved) == 1,
              f"SIGTERM: exit {p.returncode}, checkpoints {saved}")
        rows = [json.loads(line) for line in open(log)]
        check(any("val_loss" in r for r in rows) or len(rows) < 3, f"the log holds {len(rows)} lines")
        r = run(1, config, common + ["--training.steps", str(int(saved[0][5:]) + 2) if saved else "1",
                                     "--checkpoint.folder", ckpt2])
        check(r.returncode == 0 and "resumed from" in r.stdout, "the stopped run resumes")

        # The plot, where matplotlib is importable.
        try:
            import matplotlib  # noqa: F401
            png = os.path.join(tmp, "train.png")
            env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
            r = subprocess.run([DTTRAIN, "plot", log, "--out", png], capture_output=True, text=True, env=env)
            check(r.returncode == 0 and os.path.getsize(png) > 1000, f"dttrain plot wrote {png}")
        except ImportError:
            print("note: no matplotlib for this python: the plot is not checked")

        # Bad input, before any training.
        bad = os.path.join(tmp, "short")
        write_dataset(bad, 1000, 61, truncate=True)
        big = os.path.join(tmp, "big")
        write_dataset(big, 1000, 200)
        for args, words in [
                (["--training.stepz", "3"], ["unknown config key --training.stepz"]),
                (["--training.steps", "many"], ["--training.steps must be an integer"]),
                (["--data.path", bad + ".bin"], ["short.bin", "truncated"]),
                (["--data.path", big + ".bin"], ["vocabulary of 200", "larger than the model's 61"]),
                (["--parallelism.dp", "3"], ["parallelism.dp 3", "1 process(es)"])]:
            r = run(1, config, common + args)
            msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
            check(r.returncode == 1 and all(w in msg for w in words) and "step " not in r.stdout,
                  f"{' '.join(args)}: exit {r.returncode}, '{msg}'")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
