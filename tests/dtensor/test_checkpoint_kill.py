#!/usr/bin/env python3
"""Kill a checkpoint writer at random points of its saves: the newest complete checkpoint always loads bit-exact.

Each trial starts `checkpoint_writer write` on NPROC processes under dtrun (saving steps 1, 2, ... back to back,
sync or async, each step in a new folder or all into one), SIGKILLs one random rank at a random time, lets dtrun
end the others, then runs `checkpoint_writer check`: every folder with an index verifies and loads bit for bit, and
the newest is at least the last step whose save had returned. Prints the counts.

usage: test_checkpoint_kill.py DTRUN WRITER [--trials N] [--nproc P] [--seed S]
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MODES = ("sync-new", "async-new", "sync-same", "async-same")


def trial(args, rng, i):
    mode = MODES[i % len(MODES)]
    work = tempfile.mkdtemp(prefix="dt_ckpt_kill_")
    root, out = os.path.join(work, "root"), os.path.join(work, "out")
    os.makedirs(out)
    env = dict(os.environ, DT_TIMEOUT_S="20", DT_UCX_STALL_MS="200")
    cmd = [args.dtrun, "--nproc-per-node", str(args.nproc), "--grace-period", "5", args.writer, "write", root, mode,
           out]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids = {}
    deadline = time.monotonic() + 30
    while len(pids) < args.nproc and time.monotonic() < deadline and proc.poll() is None:
        for r in range(args.nproc):
            p = os.path.join(out, f"pid{r}")
            if r not in pids and os.path.exists(p):
                text = open(p).read().strip()
                if text:
                    pids[r] = int(text)
        time.sleep(0.005)
    victim = rng.randrange(args.nproc)
    delay = rng.uniform(0.0, args.window)
    time.sleep(delay)
    killed = False
    if victim in pids and proc.poll() is None:
        try:
            os.kill(pids[victim], signal.SIGKILL)
            killed = True
        except ProcessLookupError:
            pass
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        shutil.rmtree(work, ignore_errors=True)
        return mode, killed, "hang", "dtrun did not end within 60 s after the kill"
    check = subprocess.run([args.writer, "check", root, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120)
    text = check.stdout.decode(errors="replace").strip()
    shutil.rmtree(work, ignore_errors=True)
    status = "ok" if check.returncode == 0 else "bad"
    return mode, killed, status, f"rank {victim} at {delay:.3f} s: {text}" + (
        "" if status == "ok" else "\n" + output.decode(errors="replace")[-2000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dtrun")
    ap.add_argument("writer")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--window", type=float, default=1.0, help="kill within this many seconds of the start")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    counts = {"ok": 0, "bad": 0, "hang": 0}
    killed_total = mid_save = 0
    for i in range(args.trials):
        mode, killed, status, detail = trial(args, rng, i)
        counts[status] += 1
        killed_total += killed
        # An interrupted save shows as a folder without index or as files its index does not name.
        mid_save += ("incomplete 0 " not in detail) or ("stray files 0 " not in detail)
        print(f"trial {i:3d} {mode:10s} {'killed' if killed else 'exited'} {status}: {detail}", flush=True)
    print(f"trials {args.trials}, killed mid-run {killed_total} (inside a save, by the files left: {mid_save}), "
          f"newest checkpoint exact {counts['ok']}, wrong {counts['bad']}, hangs {counts['hang']}")
    return 0 if counts["ok"] == args.trials and killed_total >= args.trials // 2 else 1


if __name__ == "__main__":
    sys.exit(main())
