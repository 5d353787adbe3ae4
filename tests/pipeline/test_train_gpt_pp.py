#!/usr/bin/env python3
"""examples/train_gpt with pipeline parallelism, on processes (dtrun):

- losses: every schedule (gpipe, 1f1b, interleaved, zb-h1) on pp 2 and 4, and composed with FSDP (pp 2 x dp 2),
  TP (pp 2 x tp 2, with and without sequence parallelism) and both (pp 2 x dp 2 x tp 2 on 8 processes), with 5 blocks (which no stage count divides) and a
  batch of 10 rows (which the microbatches do not divide), against one process: within 1e-5 relative each step;
- checkpoints under the model's names (Note [Pipeline checkpoints]): saved at pp 2 x fsdp 2 after step 3, resumed at
  pp 1 (one process), pp 4, interleaved (4 stages on 2 ranks: another split of the blocks) and pp 2 x tp 2, each
  continuing with the losses of the run that never stopped; the checkpoint verifies, and an export from pp 4 holds
  every parameter once;
- a rank killed (SIGKILL), exiting, or stopped (a hung rank, SIGSTOP) in the middle of a schedule: dtrun fails, and
  every survivor fails on its own within the timeout with an error that names the lost rank and what it was in
  (the schedule's action, or the collective), never a hang. A stopped rank is not dead, so a survivor that waits on
  another survivor (itself waiting on the stopped one) names the rank it waited for; the stopped rank's neighbours
  name it.

usage: test_train_gpt_pp.py DTRUN TRAIN_GPT
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

DTRUN, TRAIN_GPT = sys.argv[1], sys.argv[2]
BASE = ["--steps", "6", "--layers", "5", "--batch", "10", "--seq", "16", "--dim", "32", "--heads", "4", "--vocab",
        "64", "--threads", "1", "--json"]
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
        if detail:
            print(detail[-3000:])


def losses(nproc, args):
    cmd = [DTRUN, "--nproc-per-node", str(nproc), TRAIN_GPT] + BASE + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, p.stdout + p.stderr
    return [json.loads(ln)["loss"] for ln in p.stdout.splitlines() if ln.startswith('{"step"')], ""


def check_losses():
    want, out = losses(1, [])
    check(want is not None and len(want) == 6, "one process trains 6 steps", out)
    if want is None:
        return
    cases = [
        (2, "1f1b pp 2, 3 microbatches", ["--pp", "2", "--microbatches", "3"]),
        (2, "gpipe pp 2, 4 microbatches", ["--pp", "2", "--pp-schedule", "gpipe", "--microbatches", "4"]),
        (4, "1f1b pp 4, 5 microbatches", ["--pp", "4", "--microbatches", "5"]),
        (2, "interleaved pp 2 x v 2, 4 microbatches", ["--pp", "2", "--pp-schedule", "interleaved",
                                                       "--microbatches", "4"]),
        (4, "zb-h1 pp 4, 4 microbatches", ["--pp", "4", "--pp-schedule", "zb-h1", "--microbatches", "4"]),
        (4, "1f1b pp 2 x fsdp 2, 2 microbatches", ["--pp", "2", "--dp", "2", "--fsdp", "--microbatches", "2"]),
        (4, "zb-h1 pp 2 x tp 2, 3 microbatches", ["--pp", "2", "--tp", "2", "--pp-schedule", "zb-h1",
                                                  "--microbatches", "3"]),
        (4, "1f1b pp 2 x tp 2 with sequence parallelism, 3 microbatches",
         ["--pp", "2", "--tp", "2", "--sequence-parallel", "--microbatches", "3"]),
        (8, "1f1b pp 2 x fsdp 2 x tp 2, 2 microbatches", ["--pp", "2", "--dp", "2", "--tp", "2", "--fsdp",
                                                         "--microbatches", "2"]),
    ]
    for nproc, label, args in cases:
        got, out = losses(nproc, args)
        worst = max((abs(g - w) / abs(w) for g, w in zip(got, want)), default=1.0) if got else 1.0
        check(got is not None and len(got) == len(want) and worst <= 1e-5,
              f"{label}: losses {got and [round(x, 5) for x in got]} against one process (worst {worst:.1e})", out)


def check_checkpoints():
    want, out = losses(1, [])
    if want is None:
        return
    with tempfile.TemporaryDirectory(prefix="dt_pp_ckpt_") as d:
        first, out = losses(4, ["--pp", "2", "--dp", "2", "--fsdp", "--microbatches", "2", "--save-dir", d,
                                "--save-every", "3", "--stop-at", "3"])
        check(first is not None and len(first) == 3 and os.path.isdir(os.path.join(d, "step-000003")),
              "pp 2 x fsdp 2 saved after step 3", out)
        v = subprocess.run([os.path.join(os.path.dirname(DTRUN), "dtckpt"), "verify", os.path.join(d, "step-000003")],
                           capture_output=True, text=True)
        check(v.returncode == 0 and ": ok" in v.stdout, "the pipeline's checkpoint verifies", v.stdout + v.stderr)
        for nproc, label, args in [(1, "one process", []),
                                   (4, "pp 4", ["--pp", "4", "--microbatches", "4"]),
                                   (2, "interleaved pp 2 x v 2", ["--pp", "2", "--pp-schedule", "interleaved",
                                                                  "--microbatches", "2"]),
                                   (4, "pp 2 x tp 2", ["--pp", "2", "--tp", "2", "--microbatches", "2"])]:
            got, out = losses(nproc, args + ["--save-dir", d, "--resume"])
            worst = max((abs(g - w) / abs(w) for g, w in zip(got, want[3:])), default=1.0) if got else 1.0
            check(got is not None and len(got) == 3 and worst <= 1e-5,
                  f"resumed at {label}: steps 4-6 as the run that never stopped (worst {worst:.1e})", out)
            shutil.rmtree(os.path.join(d, "step-000006"), ignore_errors=True)
        path = os.path.join(d, "model.safetensors")
        _, out = losses(4, ["--pp", "4", "--microbatches", "2", "--steps", "1", "--export", path])
        names = []
        if os.path.exists(path):
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                names = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
        check(len(names) == len(set(names)) == 48 and "tok_embeddings.weight" in names and "output.weight" in names,
              f"an export from pp 4 holds every parameter once ({len(names)})", out)


def check_lost_rank(action, nproc=4, victim=2):
    env = dict(os.environ, DT_FAULT_INJECT=f"{victim}:compute:300:{action}", DT_TIMEOUT_S="10")
    cmd = [DTRUN, "--nproc-per-node", str(nproc), "--tag-output", TRAIN_GPT] + BASE[:-1] + [
        "--pp", str(nproc), "--microbatches", "8", "--steps", "20"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        check(False, f"{action}: the run ended", str(e.stdout))
        return
    elapsed = time.monotonic() - t0
    out = p.stdout + p.stderr
    check(p.returncode != 0, f"{action}: dtrun failed (exit {p.returncode}) after {elapsed:.1f} s", out)
    check(elapsed < 60, f"{action}: within the timeout ({elapsed:.1f} s)", out)
    named_victim = []
    for r in range(nproc):
        if r == victim:
            continue
        err = [ln for ln in out.splitlines() if ln.startswith(f"[r{r}] train_gpt: [r{r}] ")]
        text = err[0] if err else ""
        where = re.search(r"at action #\d+ \d+(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B)\d+", text) or \
            re.search(r"(all_reduce|all_gather|send|recv)\(", text)
        if f"rank {victim}" in text:
            named_victim.append(r)
        if action != "stop":
            check(bool(err) and f"rank {victim}" in text and where is not None,
                  f"{action}: rank {r} failed naming rank {victim} and where it was: {text[:220]}", out)
        else:  # a hung rank is not dead: a survivor names the rank it waited for, or one that failed before it
            check(bool(err) and re.search(r"rank \d+", text) is not None and where is not None,
                  f"{action}: rank {r} failed naming a rank and where it was: {text[:220]}", out)
    if action == "stop":
        check(bool(named_victim), f"stop: a survivor named the stopped rank {victim} (ranks {named_victim})", out)


check_losses()
check_checkpoints()
for action in ("kill", "exit", "stop"):
    check_lost_rank(action)
print(f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
