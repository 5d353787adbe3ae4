#!/usr/bin/env python3
"""The fault matrix (issue #19): ranks fail on purpose at random points of FSDP + TP training, and the job must end
with errors that name them, never hang, leave no process behind and keep its newest complete checkpoint bit-exact.

Each trial runs `train_gpt --dp 2 --tp 2 --fsdp` (4 processes under dtrun, a checkpoint every few steps, sync or
async) with DT_FAULT_INJECT=V:POINT:N:ACTION (Note [Fault injection] in core/fault_inject.h):
  death trials   ACTION in kill, term, exit, abort at POINT in all_gather, reduce_scatter, all_reduce, compute,
                 checkpoint_save. Every survivor must exit on its own (dtrun's --failure-grace is long enough to
                 never stop one) with an error that names rank V and the operation (a collective with its number
                 "#N kind(...)", or the checkpoint save), within DT_TIMEOUT_S + 10 s of the fault; dtrun must report
                 rank V as the first failure; no rank process may remain; the newest complete checkpoint must load
                 bit for bit equal to the fault-free run's checkpoint of the same step.
  hang trials    ACTION stop (SIGSTOP: a hung rank) or skip (a lost collective: rank V takes the call's number and
                 does nothing) at a collective. Every rank that reports must quote the flight recorder ("last calls on
                 this rank: ...") within DT_TIMEOUT_S + 10 s, and at least one error must name rank V as missing at a
                 call number ("#N kind(...) ... still waiting for: ... rank V"). A skipping rank's call "completes"
                 with nothing received: when it then fails on that data (a checkpoint's agreement finds the tensors
                 differ) and exits, the others name it as dead at their call number instead, which also counts.
The fault's pass number N is drawn below the number of passes a fault-free run makes (counted once with DT_LOG=debug
for the collectives, and bounded by trial and error for compute and checkpoint saves).

Prints one line per trial and the counts (trials, hangs, failures, slowest detection); exits 1 on any failure.

usage: fault_matrix.py DTRUN TRAIN_GPT [--deaths N] [--hangs N] [--seed S] [--timeout S] [--json]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

NPROC = 4
DEATH_ACTIONS = ("kill", "term", "exit", "abort")
DEATH_POINTS = ("all_gather", "reduce_scatter", "all_reduce", "compute", "checkpoint_save")
HANG_ACTIONS = ("stop", "skip")
HANG_POINTS = ("all_gather", "reduce_scatter", "all_reduce")
STEPS, SAVE_EVERY = 8, 2
MODEL = ["--dp", "2", "--tp", "2", "--fsdp", "--layers", "2", "--dim", "64", "--heads", "4", "--vocab", "128",
         "--seq", "32", "--batch", "4", "--threads", "1", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]


def run_job(args, save_dir, extra_env, async_save, failure_grace, wall_limit):
    """Runs one job; returns (rc, [(t, line)], elapsed, pids)."""
    env = dict(os.environ, DT_UCX_STALL_MS="200", OPENBLAS_NUM_THREADS="1", **extra_env)
    env.pop("DT_TIMEOUT_S", None)
    cmd = [args.dtrun, "--nproc-per-node", str(NPROC), "--tag-output", "--timeout", str(args.timeout),
           "--failure-grace", str(failure_grace), "--grace-period", "2", args.train_gpt, *MODEL, "--keep", "100",
           "--save-dir", save_dir] + (["--async-save"] if async_save else [])
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
            if time.monotonic() - t0 > wall_limit:
                break
        proc.wait(timeout=max(1.0, wall_limit - (time.monotonic() - t0)))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = None  # a hang: dtrun itself did not finish
    if rc is None or proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    return rc, lines, time.monotonic() - t0


def leftover_ranks(save_dir):
    """Processes still running with this trial's save folder on their command line."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if save_dir in cmdline and "fault_matrix" not in cmdline:
            found.append(int(pid))
    return found


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def export(args, ckpt, out):
    """The checkpoint's tensors, {name: (dtype, shape, bytes)}, through `dtckpt export` (which verifies them)."""
    subprocess.run([args.dtckpt, "export", ckpt, out], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.STDOUT)
    tensors = read_safetensors(out)
    os.remove(out)
    return tensors


def newest_complete(save_dir):
    steps = sorted(d for d in os.listdir(save_dir) if d.startswith("step-")) if os.path.isdir(save_dir) else []
    complete = [d for d in steps if os.path.exists(os.path.join(save_dir, d, "dtensor.index.json"))]
    return complete[-1] if complete else None


def rank_errors(lines):
    """{rank: (time, message)} of each rank's error line ("[rK] train_gpt: ...")."""
    out = {}
    for t, line in lines:
        m = re.match(r"\[r(\d+)\] train_gpt: (.*)", line)
        if m and not re.match(r"\d+ layers|mesh \(", m.group(2)):
            out.setdefault(int(m.group(1)), (t, m.group(2)))
    return out


def names_rank(msg, v):
    return re.search(rf"(global rank {v}\b|\brank {v} \(pid|\brank {v} did not write|\brank {v} failed)", msg)


def names_operation(msg):
    return re.search(r"#\d+ [a-z_]+\(", msg) or "checkpoint save" in msg


def fault_time(lines):
    for t, line in lines:
        if "fault injection" in line:
            return t
    return None


def calibrate(args, work):
    """Passes per rank of each collective point in a fault-free run (DT_LOG=debug logs every call)."""
    save = os.path.join(work, "reference")
    rc, lines, _ = run_job(args, save, {"DT_LOG": "debug"}, False, 5, 300)
    if rc != 0:
        sys.exit("fault_matrix: the fault-free reference run failed:\n" + "\n".join(l for _, l in lines[-30:]))
    counts = {}
    for _, line in lines:
        m = re.match(r"\[r0\] .*dtensor D: .*?\b(all_gather|reduce_scatter|all_reduce)\(", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return save, counts


def run_trial(args, kind, i, spec, save, async_save, limits):
    """Runs a trial's job; returns (res, lines, t_fault). res["kind"] is "not fired" when the run ended before the
    fault's pass (the point's bound is lowered for the next draw)."""
    bound = args.timeout + 10
    rc, lines, _ = run_job(args, save, {"DT_FAULT_INJECT": spec}, async_save, bound + 5, bound + 60)
    t_fault = fault_time(lines)
    res = {"trial": i, "kind": kind, "spec": spec, "async": async_save, "rc": rc, "problems": []}
    if t_fault is None:
        if rc == 0:
            _, point, n, _ = spec.split(":")
            limits[point] = max(1, int(n) - 1)
            res["kind"] = "not fired"
            return res, lines, t_fault
        res["problems"].append(f"the job failed (rc {rc}) without the fault")
    if rc is None:
        res["problems"].append("hang: dtrun did not finish")
        res["hang"] = True
    return res, lines, t_fault


def check_leftovers(res, save):
    left = leftover_ranks(save)
    if left:
        res["problems"].append(f"processes left behind: {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def draw_fault(rng, i, actions, points, limits):
    """Trial i's (action, point, victim, spec): every action at every point in turn, a random rank and occurrence."""
    action, point = actions[i % len(actions)], points[(i // len(actions)) % len(points)]
    victim = rng.randrange(NPROC)
    n = rng.randint(1, max(1, limits[point]))
    return action, point, victim, f"{victim}:{point}:{n}:{action}"


def check_death(args, rng, ref_dir, ref_cache, work, i, limits):
    action, point, victim, spec = draw_fault(rng, i, DEATH_ACTIONS, DEATH_POINTS, limits)
    async_save = rng.random() < 0.5
    save = os.path.join(work, f"t{i}")
    bound = args.timeout + 10
    res, lines, t_fault = run_trial(args, "death", i, spec, save, async_save, limits)
    if res["kind"] == "not fired":
        return res
    errors = rank_errors(lines)
    slowest = 0.0
    for r in range(NPROC):
        if r == victim:
            continue
        if r not in errors:
            res["problems"].append(f"survivor {r} reported no error")
            continue
        t, msg = errors[r]
        slowest = max(slowest, t - (t_fault or 0))
        if not names_rank(msg, victim):
            res["problems"].append(f"survivor {r}'s error does not name rank {victim}: {msg[:300]}")
        if not names_operation(msg):
            res["problems"].append(f"survivor {r}'s error names no operation: {msg[:300]}")
        if t - (t_fault or 0) > bound:
            res["problems"].append(f"survivor {r} reported {t - t_fault:.1f} s after the fault (> {bound} s)")
    res["detect_s"] = round(slowest, 3)
    first = [l for _, l in lines if "failed first" in l]
    if not first:
        res["problems"].append("dtrun reported no first failure")
    elif not re.search(rf"dtrun: rank {victim} failed first", first[-1]):
        # dtrun cannot tell an exit(3) from the survivors' exit(1) reaped in the same wake-up (Note [The first
        # failure] in tools/dtrun.cc); a victim killed by a signal must be named.
        if action == "exit":
            res["first_misnamed"] = True
        else:
            res["problems"].append(f"dtrun did not report rank {victim} as the first failure: {first}")
    if any("still running" in l for _, l in lines):
        res["problems"].append("dtrun had to stop a survivor")
    check_leftovers(res, save)
    newest = newest_complete(save)
    res["checkpoint"] = newest
    if newest is not None:
        if newest not in ref_cache:
            ref_cache[newest] = export(args, os.path.join(ref_dir, newest), os.path.join(work, "ref.safetensors"))
        got = export(args, os.path.join(save, newest), os.path.join(work, "trial.safetensors"))
        if got != ref_cache[newest]:
            bad = sorted(k for k in set(got) | set(ref_cache[newest]) if got.get(k) != ref_cache[newest].get(k))
            res["problems"].append(f"{newest} differs from the fault-free run's: {bad[:5]}")
    shutil.rmtree(save, ignore_errors=True)
    return res


def check_hang(args, rng, work, i, limits):
    action, point, victim, spec = draw_fault(rng, i, HANG_ACTIONS, HANG_POINTS, limits)
    save = os.path.join(work, f"h{i}")
    bound = args.timeout + 10
    res, lines, t_fault = run_trial(args, "hang", i, spec, save, False, limits)
    if res["kind"] == "not fired":
        return res
    errors = rank_errors(lines)
    if not errors:
        res["problems"].append("no rank reported an error")
    missing = False
    slowest = 0.0
    for r, (t, msg) in errors.items():
        slowest = max(slowest, t - (t_fault or 0))
        if r == victim and action == "skip":
            continue  # its skipped call "completed" with nothing received: its own error is about its data
        if "last calls on this rank:" not in msg:
            res["problems"].append(f"rank {r}'s error does not quote the flight recorder: {msg[:300]}")
        who = rf"(global rank {victim}\b|\brank {victim} \(pid)"
        # Waiting for the victim at a call number, or (a skipping victim that failed on its data and exited) its death,
        # or (a skipping victim, one call ahead, timed out first and told its group) its report of its own later call,
        # beside this rank's record of the earlier call still pending.
        if re.search(rf"#\d+ [a-z_]+\(.*(still waiting for: .*?{who}|{who}[^;]* died|{who}[^;:]* reported: #\d+)", msg):
            missing = True
    if not missing:
        res["problems"].append(f"no error names rank {victim} as missing at a call number: " +
                               " | ".join(f"r{r}: {m[:240]}" for r, (_, m) in sorted(errors.items())))
    if errors and slowest > bound:
        res["problems"].append(f"an error came {slowest:.1f} s after the fault (> {bound} s)")
    res["detect_s"] = round(slowest, 3)
    check_leftovers(res, save)
    shutil.rmtree(save, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dtrun")
    ap.add_argument("train_gpt")
    ap.add_argument("--dtckpt", help="default: beside dtrun")
    ap.add_argument("--deaths", type=int, default=200)
    ap.add_argument("--hangs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=5, help="DT_TIMEOUT_S of the jobs")
    ap.add_argument("--json", action="store_true", help="one JSON line per trial")
    args = ap.parse_args()
    args.dtckpt = args.dtckpt or os.path.join(os.path.dirname(args.dtrun), "dtckpt")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="dt_fault_matrix_")
    counts = {"death": 0, "hang": 0, "not fired": 0}
    failures, hangs, slowest, misnamed = [], 0, {"death": 0.0, "hang": 0.0}, 0
    try:
        ref_dir, calls = calibrate(args, work)
        limits = {p: calls.get(p, 1) for p in HANG_POINTS}
        limits["compute"] = 4000
        limits["checkpoint_save"] = STEPS // SAVE_EVERY
        print(f"fault_matrix: fault-free run: {calls} collective calls on rank 0; DT_TIMEOUT_S={args.timeout}")
        ref_cache = {}
        plan = [("death", k) for k in range(args.deaths)] + [("hang", k) for k in range(args.hangs)]
        done = {"death": 0, "hang": 0}
        attempts = 0
        while plan and attempts < 3 * (args.deaths + args.hangs) + 20:
            kind, k = plan[0]
            attempts += 1
            res = (check_death(args, rng, ref_dir, ref_cache, work, k, limits) if kind == "death" else
                   check_hang(args, rng, work, k, limits))
            counts[res["kind"]] += 1
            if res["kind"] == "not fired":
                continue  # drawn past the end of the run: the same trial again, with a lower bound
            plan.pop(0)
            done[kind] += 1
            hangs += 1 if res.get("hang") else 0
            misnamed += 1 if res.get("first_misnamed") else 0
            slowest[kind] = max(slowest[kind], res.get("detect_s", 0.0))
            status = "ok" if not res["problems"] else "FAIL"
            if res["problems"]:
                failures.append(res)
            if args.json:
                print(json.dumps(res), flush=True)
            else:
                extra = f" checkpoint {res.get('checkpoint')}" if kind == "death" else ""
                print(f"  {kind} {k:3d} {res['spec']:<28} rc {res['rc']}  detected in {res.get('detect_s', 0):.2f} s"
                      f"{extra}  {status}", flush=True)
                for p in res["problems"]:
                    print(f"      {p}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {"death_trials": done["death"], "hang_trials": done["hang"], "redrawn": counts["not fired"],
               "exit_victim_not_named_first_by_dtrun": misnamed,
               "hangs": hangs, "failures": len(failures), "slowest_death_detection_s": slowest["death"],
               "slowest_hang_detection_s": slowest["hang"], "timeout_s": args.timeout}
    print(f"fault_matrix: {done['death']} death trials, {done['hang']} stop/skip trials, {hangs} hangs, "
          f"{len(failures)} failures; slowest detection {slowest['death']:.2f} s (deaths), "
          f"{slowest['hang']:.2f} s (stops and skips, DT_TIMEOUT_S={args.timeout:g})")
    print(json.dumps(summary))
    return 1 if failures or done["death"] < args.deaths or done["hang"] < args.hangs else 0


if __name__ == "__main__":
    sys.exit(main())
