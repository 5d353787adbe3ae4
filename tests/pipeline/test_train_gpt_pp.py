#!/usr/bin/env python3
"""examples/train_gpt with pipeline parallelism, on processes (dtrun):

- losses: every schedule (gpipe, 1f1b, interleaved, zb-h1) on pp 2 and 4, and composed with FSDP (pp 2 x dp 2),
  TP (pp 2 x tp 2) and both (pp 2 x dp 2 x tp 2 on 8 processes), with 5 blocks (which no stage count divides) and a
  batch of 10 rows (which the microbatches do not divide), against one process: within 1e-5 relative each step;
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
import subprocess
import sys
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
        (8, "1f1b pp 2 x fsdp 2 x tp 2, 2 microbatches", ["--pp", "2", "--dp", "2", "--tp", "2", "--fsdp",
                                                         "--microbatches", "2"]),
    ]
    for nproc, label, args in cases:
        got, out = losses(nproc, args)
        worst = max((abs(g - w) / abs(w) for g, w in zip(got, want)), default=1.0) if got else 1.0
        check(got is not None and len(got) == len(want) and worst <= 1e-5,
              f"{label}: losses {got and [round(x, 5) for x in got]} against one process (worst {worst:.1e})", out)


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
    for r in range(nproc):
        if r == victim:
            continue
        err = [ln for ln in out.splitlines() if ln.startswith(f"[r{r}] train_gpt: [r{r}] ")]
        text = err[0] if err else ""
        where = re.search(r"at action #\d+ \d+(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B)\d+", text) or \
            re.search(r"(all_reduce|all_gather|send|recv)\(", text)
        waited = re.search(r"from rank (\d+)|rank (\d+) \(global rank", text)
        named = f"rank {victim}" in text if action != "stop" or abs(r - victim) == 1 else waited is not None
        check(bool(err) and named and where is not None,
              f"{action}: rank {r} failed naming {'the rank it waited for' if action == 'stop' and abs(r - victim) != 1 else f'rank {victim}'} "
              f"and where it was: {text[:220]}", out)


check_losses()
for action in ("kill", "exit", "stop"):
    check_lost_rank(action)
print(f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
