#!/usr/bin/env python3
"""Elastic training trials (issue #37): a rank of `train_gpt` FSDP + TP is lost, and the job goes on by itself on the
ranks that remain, from its newest complete checkpoint, to the final step, with the training curve of a run that
changed size at the same steps.

Each trial runs `train_gpt --dp 2 --tp 2 --fsdp` (4 processes, a checkpoint every 2 steps, sync or async) under
`dtrun --nproc-per-node 2:4 --world-multiple 2 --max-restarts 3 --slot-file F`, with DT_FAULT_INJECT=V:POINT:N:ACTION
(Note [Fault injection]: the first generation only) at a random point of training or of a save (a collective,
compute, a checkpoint's write): ACTION kill, term, exit, or stop (a hung rank, lost once the collective timeout
fires). dtrun loses the failed rank's slot, the job restarts on 2 ranks (dp 1 x tp 2, gradient accumulation 2: the
same global batch), and in every third trial the slot is returned through F while generation 1 trains, so that the
job goes back to 4 ranks. Each trial checks:
  - the job ends by itself (exit 0) at the final step, on 4, then 2 (then 4) ranks, and no process is left;
  - the final weights equal, within 1e-5 (relative to each tensor's largest value), those of a fault-free run that
    made the same world-size changes at the same steps (run here: one dtrun per size, --resume, --stop-at);
  - no step's data was trained twice or skipped: from the loader's log (train_gpt --sample-log), every step's rows
    as trained by the generation that kept that step cover the global batch exactly once;
  - every checkpoint folder left is complete (the save the failure cut short was removed, never loaded).
Before the trials, runs that change dp and gradient accumulation at a step (4 -> 2 and 2 -> 4 ranks, and 2
throughout) must end with the weights of the uninterrupted 4-rank run (the same global batch).
It prints the time from the failure to the first step of the next generation (detection + restart + reshard load)
per trial, and their median.

usage: elastic.py DTRUN TRAIN_GPT [--trials N] [--seed S] [--timeout S] [--keep-going]
"""
import argparse
import array
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_matrix import check_leftovers, read_safetensors  # noqa: E402  (one of each, shared)

STEPS, SAVE_EVERY, BATCH = 16, 2, 8
MODEL = ["--dp", "2", "--tp", "2", "--fsdp", "--layers", "2", "--dim", "64", "--heads", "4", "--vocab", "128",
         "--seq", "32", "--batch", str(BATCH), "--threads", "1", "--steps", str(STEPS), "--save-every",
         str(SAVE_EVERY), "--keep", "100"]
ACTIONS = ("kill", "term", "exit", "stop")
POINTS = ("all_gather", "reduce_scatter", "all_reduce", "compute", "checkpoint_save")


def job_env(extra):
    env = dict(os.environ, DT_UCX_STALL_MS="200", OPENBLAS_NUM_THREADS="1", **extra)
    for k in ("DT_TIMEOUT_S", "DT_FAULT_INJECT", "DT_RESTART_COUNT", "DT_MAX_RESTARTS"):
        if k not in extra:
            env.pop(k, None)
    return env


def run(cmd, env, wall_limit, on_line=None):
    """Runs cmd; returns (rc or None on a hang, [(t, line)])."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
        if on_line:
            on_line(lines)
        if time.monotonic() - t0 > wall_limit:
            break
    try:
        proc.wait(timeout=max(1.0, wall_limit - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, lines
    return proc.returncode, lines


def generations(lines):
    """[(generation, world, first step)] from rank 0's lines."""
    out, gen = [], None
    for _, line in lines:
        m = re.match(r"\[r0\] elastic: generation (\d+) on (\d+) ranks", line)
        if m:
            gen = [int(m.group(1)), int(m.group(2)), 1]
            out.append(gen)
        m = re.match(r"\[r0\] resumed from .* \(step (\d+)\)", line)
        if m and gen is not None:
            gen[2] = int(m.group(1)) + 1
    return [tuple(g) for g in out]


def calibrate(args, work):
    """Passes of rank 0 through each collective in a fault-free run (DT_LOG=debug logs every call)."""
    cmd = [args.dtrun, "--nproc-per-node", "4", "--tag-output", args.train_gpt, *MODEL, "--save-dir",
           os.path.join(work, "calibrate")]
    rc, lines = run(cmd, job_env({"DT_LOG": "debug"}), 300)
    if rc != 0:
        sys.exit("elastic: the fault-free run failed:\n" + "\n".join(l for _, l in lines[-30:]))
    counts = {p: 0 for p in POINTS}
    for _, line in lines:
        m = re.match(r"\[r0\] .*dtensor D: .*?\b(all_gather|reduce_scatter|all_reduce)\(", line)
        if m:
            counts[m.group(1)] += 1
    shutil.rmtree(os.path.join(work, "calibrate"), ignore_errors=True)
    # compute and checkpoint_save are bounded by trial and error (a fault past the run's end is drawn again lower).
    counts["compute"], counts["checkpoint_save"] = 2000, STEPS // SAVE_EVERY
    return counts


def replay(args, segments, work, cache, model=MODEL):
    """The final weights of a fault-free run with the same sizes from the same steps: one dtrun per segment."""
    key = (tuple(segments), tuple(model))
    if key in cache:
        return cache[key]
    save = os.path.join(work, f"replay{len(cache)}")
    shutil.rmtree(save, ignore_errors=True)
    out = save + ".safetensors"
    for j, (world, first) in enumerate(segments):
        last = segments[j + 1][1] - 1 if j + 1 < len(segments) else STEPS
        if last < first:
            continue
        cmd = [args.dtrun, "--nproc-per-node", str(world), "--max-restarts", "1", "--tag-output", args.train_gpt,
               *model, "--save-dir", save, "--stop-at", str(last)] + (["--resume"] if first > 1 else []) + \
              (["--export", out] if last == STEPS else [])
        rc, lines = run(cmd, job_env({}), 300)
        if rc != 0:
            sys.exit(f"elastic: the replay {segments} failed at segment {j}:\n" +
                     "\n".join(l for _, l in lines[-20:]))
    cache[key] = read_safetensors(out)
    shutil.rmtree(save, ignore_errors=True)
    return cache[key]


def max_rel_diff(a, b):
    """The largest |a - b| of a tensor over its largest |b|, over every f32 tensor of b."""
    worst = 0.0
    for name, (dtype, _, data) in b.items():
        if name not in a or a[name][0] != dtype or dtype != "F32":
            return float("inf")
        x, y = array.array("f", a[name][2]), array.array("f", data)
        scale = max(max((abs(v) for v in y), default=0.0), 1e-30)
        worst = max(worst, max((abs(p - q) for p, q in zip(x, y)), default=0.0) / scale)
    return worst


def check_samples(prefix, gens):
    """Problems with the loader's log: each step's rows, as trained by the generation that kept the step."""
    records = {}
    folder, base = os.path.split(prefix)
    for name in os.listdir(folder):
        if name.startswith(base + ".dp"):
            for line in open(os.path.join(folder, name)):
                m = re.match(r"gen (\d+) step (\d+) rows (\d+) (\d+) dp (\d+)$", line.strip())
                if m:
                    g, step, row0, rows, _ = map(int, m.groups())
                    records.setdefault(step, []).append((g, row0, rows))
    problems = []
    for step in range(1, STEPS + 1):
        if step not in records:
            problems.append(f"step {step} was never trained")
            continue
        keeper = max(g for g, _, _ in records[step])
        want = max(g for g, _, first in gens if first <= step) if gens else 0
        if keeper != want:
            problems.append(f"step {step} kept by generation {keeper}, expected {want}")
        covered = sorted((row0, rows) for g, row0, rows in records[step] if g == keeper)
        rows = [r for row0, n in covered for r in range(row0, row0 + n)]
        if rows != list(range(BATCH)):
            problems.append(f"step {step}: generation {keeper} trained rows {rows}, not each of 0..{BATCH - 1} once")
    return problems


def trial(args, rng, i, limits, work, cache):
    action, point = ACTIONS[i % len(ACTIONS)], POINTS[i % len(POINTS)]  # every pair once in 20 trials
    victim = rng.randrange(4)
    n = rng.randint(1, max(1, limits[point]))
    spec = f"{victim}:{point}:{n}:{action}"
    async_save = rng.random() < 0.5
    give_back = i % 3 == 2
    d = os.path.join(work, f"t{i}")
    os.makedirs(d)
    slot_file = os.path.join(d, "lost-slots")
    cmd = [args.dtrun, "--nproc-per-node", "2:4", "--world-multiple", "2", "--max-restarts", "3", "--slot-file",
           slot_file, "--tag-output", "--timeout", str(args.timeout), "--failure-grace", "2", "--grace-period", "2",
           "--settle", "0.5", args.train_gpt, *MODEL, "--save-dir", os.path.join(d, "ck"), "--sample-log",
           os.path.join(d, "samples"), "--export", os.path.join(d, "final.safetensors")] + \
          (["--async-save"] if async_save else [])
    state = {"returned": False, "gen1_steps": 0, "after": rng.randint(1, 2)}

    def on_line(lines):  # in trials that give the slot back: after a few steps of generation 1
        if not give_back or state["returned"]:
            return
        _, line = lines[-1]
        m = re.match(r"\[r0\] step +(\d+) ", line)
        if m and len(generations(lines)) >= 2:
            state["gen1_steps"] += 1
            if state["gen1_steps"] >= state["after"] and int(m.group(1)) <= STEPS - 6:
                open(slot_file, "w").close()
                state["returned"] = True

    rc, lines = run(cmd, job_env({"DT_FAULT_INJECT": spec}), 4 * args.timeout + 120, on_line)
    res = {"trial": i, "spec": spec, "async": async_save, "give_back": give_back, "rc": rc, "problems": []}
    fault_t = next((t for t, l in lines if "fault injection" in l), None)
    if fault_t is None and rc == 0:
        _, point, n, _ = spec.split(":")
        limits[point] = max(1, int(n) - 1)
        res["kind"] = "not fired"
        shutil.rmtree(d, ignore_errors=True)
        return res, lines
    gens = generations(lines)
    res["generations"] = gens
    check_leftovers(res, d)
    if rc != 0:
        res["problems"].append(f"the job did not end by itself with exit 0 (rc {rc})")
    # The sizes dtrun started (a generation stopped before it trained a step prints nothing of its own).
    worlds = [4] + [int(m.group(1)) for _, l in lines for m in [re.match(r"dtrun: generation \d+: (\d+) rank", l)] if m]
    went_back = any("slot(s) returned" in l for _, l in lines)
    want = [4, 2, 4] if went_back else [4, 2]
    res["went_back"] = went_back
    if worlds != want or (went_back and not state["returned"]):
        res["problems"].append(f"the job ran on {worlds} ranks, expected {want}")
    if not any(re.match(rf"\[r0\] (step +{STEPS} |done:)", l) for _, l in lines):
        res["problems"].append(f"no step {STEPS}")
    # The time from the failure to the next generation's first step.
    if fault_t is not None:
        seen_gen1 = False
        for t, l in lines:
            seen_gen1 = seen_gen1 or l.startswith("dtrun: generation 1:")
            if seen_gen1 and re.match(r"\[r0\] step ", l):
                res["restart_s"] = round(t - fault_t, 2)
                break
    if not res["problems"]:
        final = read_safetensors(os.path.join(d, "final.safetensors"))
        ref = replay(args, [(w, first) for _, w, first in gens], work, cache)
        res["max_rel_diff"] = max_rel_diff(final, ref)
        if res["max_rel_diff"] > 1e-5:
            res["problems"].append(f"final weights differ from the replay by {res['max_rel_diff']:.3g} (> 1e-5)")
        res["problems"] += check_samples(os.path.join(d, "samples"), gens)
        ck = os.path.join(d, "ck")
        for name in sorted(os.listdir(ck)):
            if not os.path.exists(os.path.join(ck, name, "dtensor.index.json")):
                res["problems"].append(f"an incomplete checkpoint folder was left: {name}")
    if not res["problems"] or not args.keep_going:
        shutil.rmtree(d, ignore_errors=True)
    return res, lines


def children(pid):
    """The processes whose parent is pid."""
    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and int(open(f"/proc/{p}/stat").read().rsplit(") ", 1)[1].split()[1]) == pid:
                out.append(int(p))
        except (OSError, IndexError, ValueError):
            pass
    return out


def nodes_trial(args, work, cache):
    """Note [Agent rendezvous]: two node agents of 2 ranks each (dtrun --nnodes 1:2) on this machine; node 1's agent
    and its ranks are killed: node 0 goes on alone on 2 ranks; a new node 1 agent comes, and the job grows back to 4.
    Returns the problems (an empty list when it went as it should)."""
    import socket
    import threading
    model = [("128" if a == "64" else a) for a in MODEL]  # dim 128: steps long enough to see them
    d = os.path.join(work, "nodes")
    os.makedirs(d)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = job_env({"DT_STORE_SECRET": "elastic-nodes-test-secret"})
    lines, lock = [], threading.Lock()
    t0 = time.monotonic()

    def agent(node):
        cmd = [args.dtrun, "--nproc-per-node", "2", "--nnodes", "1:2", "--node-rank", str(node), "--master-addr",
               "127.0.0.1", "--master-port", str(port), "--max-restarts", "3", "--settle", "1", "--timeout",
               str(args.timeout), "--failure-grace", "2", "--grace-period", "2", "--tag-output", args.train_gpt, *model,
               "--save-dir", os.path.join(d, "ck"), "--sample-log", os.path.join(d, "samples"), "--export",
               os.path.join(d, "final.safetensors")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def read():
            for line in proc.stdout:
                with lock:
                    lines.append((time.monotonic() - t0, f"node{node}: " + line.rstrip("\n")))
        threading.Thread(target=read, daemon=True).start()
        return proc

    def wait_for(pattern, limit=120):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with lock:
                if any(re.search(pattern, l) for _, l in lines):
                    return True
            time.sleep(0.01)
        return False

    a0, a1 = agent(0), agent(1)
    problems = []
    if not wait_for(r"node0: \[r0\] step +3 "):
        problems.append("the 2-node job did not reach step 3")
    for pid in children(a1.pid) + [a1.pid]:  # node 1 is lost: its agent and its ranks
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    a1.wait()
    if not wait_for(r"node0: \[r0\] elastic: generation 1 on 2 ranks") or not wait_for(r"node0: \[r0\] step "):
        problems.append("node 0 did not go on alone")
    a1 = agent(1)  # node 1 comes back
    for p in (a0, a1):
        try:
            p.wait(timeout=4 * args.timeout + 120)
        except subprocess.TimeoutExpired:
            problems.append("a node agent did not finish")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    time.sleep(0.2)
    if a0.returncode != 0 or a1.returncode != 0:
        problems.append(f"the agents exited with {a0.returncode} and {a1.returncode}")
    node0 = [(t, l[len("node0: "):]) for t, l in lines if l.startswith("node0: ")]
    gens = generations(node0)
    worlds = [w for _, w, _ in gens]
    if worlds != [4, 2, 4]:
        problems.append(f"the job ran on {worlds} ranks, expected [4, 2, 4]")
    if not problems:
        diff = max_rel_diff(read_safetensors(os.path.join(d, "final.safetensors")),
                            replay(args, [(w, first) for _, w, first in gens], work, cache, model))
        if diff > 1e-5:
            problems.append(f"final weights differ from the replay by {diff:.3g}")
    print(f"elastic: 2 node agents, node 1 lost and back: ranks@step "
          f"{' -> '.join(f'{w}@{s}' for _, w, s in gens)}  {'ok' if not problems else 'FAIL'}", flush=True)
    for p in problems:
        print(f"      {p}", flush=True)
    if problems:
        print("\n".join("      " + l for _, l in lines[-40:]), flush=True)
    shutil.rmtree(d, ignore_errors=True)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dtrun")
    ap.add_argument("train_gpt")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=4, help="DT_TIMEOUT_S of the jobs (a hung rank's detection)")
    ap.add_argument("--keep-going", action="store_true", help="keep a failed trial's folder")
    ap.add_argument("--json", action="store_true", help="one JSON line per trial")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="dt-elastic-")
    failures, restart_times, redrawn, done, went_back = [], [], 0, 0, 0
    cache = {}
    try:
        limits = calibrate(args, work)
        # Note [Resize policy]: a run that goes from dp 2 to dp 1 x grad accum 2 halfway, and one on dp 1 throughout,
        # equal the uninterrupted dp 2 run (the same global batch).
        whole = replay(args, [(4, 1)], work, cache)
        for segments in ([(4, 1), (2, STEPS // 2 + 1)], [(2, 1)], [(2, 1), (4, STEPS // 2 + 1)]):
            diff = max_rel_diff(replay(args, segments, work, cache), whole)
            ok = diff <= 1e-5
            print(f"elastic: {segments} (ranks, first step) against 4 ranks throughout: weights {diff:.1e} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
            if not ok:
                failures.append({"segments": segments, "max_rel_diff": diff})
        # Note [Resize policy]'s refusals, as the program says them: tp 4 cannot shrink onto 2 ranks; the model
        # does not fit a 1 MiB budget on 1 rank.
        for extra, world, want in ((["--tp", "4"], 2, "cannot go on with 2 rank(s): tp 4 x pp 1 = 4 ranks"),
                                   (["--memory-budget", "1"], 2, "over its budget of 1.0 MiB")):
            model = list(MODEL)
            if extra[0] in model:
                model[model.index(extra[0]) + 1] = extra[1]
            else:
                model += extra
            rc, lines = run([args.dtrun, "--nproc-per-node", str(world), "--max-restarts", "1", args.train_gpt,
                             *model, "--save-dir", os.path.join(work, "refused")], job_env({}), 120)
            ok = rc not in (0, None) and any(want in l for _, l in lines)
            print(f"elastic: {' '.join(extra)} on {world} ranks refused: {'ok' if ok else 'FAIL'}", flush=True)
            if not ok:
                failures.append({"refusal": extra, "rc": rc, "lines": [l for _, l in lines[-5:]]})
        if nodes_trial(args, work, cache):
            failures.append({"trial": "nodes"})
        print(f"elastic: {args.trials} trials; passes of a fault-free run: {limits}", flush=True)
        i = 0
        while done < args.trials and redrawn < 3 * args.trials + 20:
            res, lines = trial(args, rng, i, limits, work, cache)
            if res.get("kind") == "not fired":
                redrawn += 1
                continue  # past the run's end: the same trial again, drawn lower
            done += 1
            i += 1
            went_back += 1 if res.get("went_back") else 0
            if "restart_s" in res:
                restart_times.append(res["restart_s"])
            if args.json:
                print(json.dumps(res), flush=True)
            else:
                sizes = " -> ".join(f"{w}@{s}" for _, w, s in res.get("generations", []))
                print(f"  trial {res['trial']:3d} {res['spec']:<28} {'async' if res['async'] else 'sync '} "
                      f"ranks@step {sizes:<18} restart {res.get('restart_s', float('nan')):5.2f} s  "
                      f"weights {res.get('max_rel_diff', float('nan')):.1e}  "
                      f"{'ok' if not res['problems'] else 'FAIL'}", flush=True)
            if res["problems"]:
                failures.append(res)
                for p in res["problems"]:
                    print(f"      {p}", flush=True)
                print("      --- the job's last lines:\n" + "\n".join("      " + l for _, l in lines[-25:]),
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = statistics.median(restart_times) if restart_times else float("nan")
    print(f"elastic: {done} trials ({went_back} went back to 4 ranks), {len(failures)} failures; failure to next "
          f"generation's first step: median "
          f"{median:.2f} s, max {max(restart_times, default=float('nan')):.2f} s over {len(restart_times)} restarts "
          f"(DT_TIMEOUT_S={args.timeout:g} for hung ranks)")
    print(json.dumps({"trials": done, "went_back_to_4": went_back, "failures": len(failures), "restart_median_s": median,
                      "restart_max_s": max(restart_times, default=None), "redrawn": redrawn}))
    return 1 if failures or done < args.trials else 0


if __name__ == "__main__":
    sys.exit(main())
