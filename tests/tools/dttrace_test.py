#!/usr/bin/env python3
"""tools/dttrace.py on synthetic rank files and flight-recorder dumps written here (a generator independent of the
tool, which knows what it wrote):

- summary --json: per step and rank the step time, compute, exposed communication and idle (within 1 us); per
  collective kind the spans, calls, bytes, time, exposed time and hidden share (waits matched by (comm, seq), a
  send/recv's by overlap); the straggler (rank 2 issues every all_reduce 5 ms late) and the rank with the most
  compute (rank 3), on 4 ranks with 3 steps; a rank that dropped events; one rank without step spans (the whole
  trace as step "all", no straggler section, a wait of seq -1, a failed call, a CUDA op); the text form;
- merge: every event of every rank, pids 0..3, a schema check of the Chrome trace event format, the ranks' blocks;
  a warning for a missing rank;
- fr: rank 1 never issued #7 (named, with the call), a dead rank, a collective mismatch (both signatures named),
  a call pending on every member;
- bad input (a missing folder, malformed JSON, another format version, a bad event, a wrong rank, a bad dump): an
  exit code other than 0 and a message naming the file;
- plot: a PNG when matplotlib imports (else a note, and plot's clear error).
Usage: dttrace_test.py DTTRACE   (meson passes the py-venv as DT_PY_VENV: the test re-executes there for matplotlib)
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from py_venv import reexec_in_venv  # noqa: E402

reexec_in_venv()  # matplotlib for the plot, when the py-venv has it
DTTRACE = sys.argv[1]
failures = []
TOL = 1.0  # us


def check(ok, what, proc=None):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
        if proc is not None:
            print(f"     exit {proc.returncode}\n     stdout: {proc.stdout[-2000:]}\n"
                  f"     stderr: {proc.stderr[-2000:]}")


def dttrace(*args):
    return subprocess.run([sys.executable, DTTRACE, *args], capture_output=True, text=True, timeout=120)


def close(a, b):
    return a is not None and abs(a - b) <= TOL


# ---------------------------------------------------------------------------------------------------------------
# The generator: 4 ranks, 3 steps of 50 ms each on the main thread (tid 1), all ranks' clocks aligned.
#
# In each step, relative to its start S (us):
#   [0, 10000)        op matmul
#   all_reduce #2k-1  issued at 10000 + 10 r (rank 2: at 15000, 5 ms late), completes at 16000 (comm track 1000)
#   [10000, 12000)    op add (overlaps the all_reduce: hidden)
#   wait              [12000, 16000) (rank 2: [15000, 16000))
#   [16000, 17000)    fsdp wait_unshard; all_gather #2k issued at 16000 + 10 r, completes at 17000 (no wait span)
#   [17000, 20000)    optimizer AdamW.step (rank 3: [17000, 27000), the most compute)
#   [30000, 40000)    user span holding an op [31000, 32000)
#   thread 2:         checkpoint save.write [29000, 36000) holding an op [30000, 35000) (not the step's thread)
#   rank 0:           send to 1 [40000, 41500) waited on [41000, 41500), a second send [44000, 44200) (comm p01)
#   rank 1:           recv from 0 [40500, 42000), waited on [41000, 42000) inside an op [40000, 43000) (not exposed)
#   [45000, 46000)    redistribute, on its own track (not the step's thread: idle)
#   [46000, 46500)    fsdp wait_reduce (exposed)
#   rank 3, step 3:   a wait [47000, 47500) on a call that is in no file (#99): exposed, and unmatched
# Rank 0 has an op before the first step (outside every step); rank 3 dropped 5 events.

WORLD, STEPS, STEP_US, GAP_US = 4, 3, 50000.0, 100000.0
AR_SIG, AG_SIG = "all_reduce(count=4, f32, sum)", "all_gather(count=16, f32)"


def step_start(k):
    return 1000.0 + (k - 1) * GAP_US


def gen_rank(r, world=WORLD):
    ev = [{"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}},
          {"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}},
          {"ph": "M", "name": "thread_name", "pid": r, "tid": 1, "args": {"name": "main"}},
          {"ph": "M", "name": "thread_name", "pid": r, "tid": 2, "args": {"name": "checkpoint writer"}},
          {"ph": "M", "name": "thread_name", "pid": r, "tid": 1000, "args": {"name": "comm w"}},
          {"ph": "M", "name": "thread_name", "pid": r, "tid": 1002, "args": {"name": "redistribute"}}]
    if r in (0, 1):
        ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 1001, "args": {"name": "comm p01"}})
    exp = {}  # step -> {"compute", "exposed"}
    colls = []  # (kind, comm, seq, ts, dur, bytes, exposed)

    def x(name, cat, ts, dur, tid=1, **args):
        ev.append({"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": r, "tid": tid, "args": args})

    def coll(kind, comm, seq, ts, end, nbytes, sig, exposed, tid=1000, peer=-1, ranks=None):
        ranks = ranks or list(range(world))
        x(kind, "collective", ts, end - ts, tid, comm=comm, seq=seq, bytes=nbytes, ranks=ranks,
          rank_in_comm=ranks.index(r), peer=peer, ok=True, signature=sig)
        colls.append((kind, comm, seq, ts, end - ts, nbytes, exposed))

    if r == 0:
        x("matmul", "op", 200.0, 300.0, shapes="[4,8] [8,16]", device="cpu")
    for k in range(1, STEPS + 1):
        S = step_start(k)
        compute = exposed = 0.0
        x("step", "step", S, STEP_US, step=k)
        x("matmul", "op", S, 10000.0, shapes="[4,8] [8,16]", device="cpu")
        compute += 10000
        issue = S + (15000.0 if r == 2 else 10000.0 + 10 * r)
        wait_from = S + 15000.0 if r == 2 else S + 12000.0
        coll("all_reduce", "w", 2 * k - 1, issue, S + 16000, 16, AR_SIG, S + 16000 - wait_from)
        x("add", "op", S + 10000, 2000.0, shapes="[4] [4]", device="cpu")
        compute += 2000
        x("wait", "wait", wait_from, S + 16000 - wait_from, comm="w", seq=2 * k - 1)
        exposed += S + 16000 - wait_from
        x("wait_unshard", "fsdp", S + 16000, 1000.0, group="layers.0")
        exposed += 1000
        coll("all_gather", "w", 2 * k, S + 16000 + 10 * r, S + 17000, 64, AG_SIG, 0.0)
        adam = 10000.0 if r == 3 else 3000.0
        x("AdamW.step", "optimizer", S + 17000, adam)
        compute += adam
        x("forward_block", "user", S + 30000, 10000.0)
        x("matmul", "op", S + 31000, 1000.0, shapes="[4,8] [8,16]", device="cpu")
        compute += 1000
        x("save.write", "checkpoint", S + 29000, 7000.0, tid=2)
        x("copy", "op", S + 30000, 5000.0, tid=2, shapes="[64]", device="cpu")
        if r == 0:
            coll("send", "p01", 0, S + 40000, S + 41500, 32, "send(count=8, f32, peer=1)", 500.0, tid=1001,
                 peer=1, ranks=[0, 1])
            x("wait", "wait", S + 41000, 500.0, comm="p01", seq=0)
            exposed += 500
            coll("send", "p01", 0, S + 44000, S + 44200, 32, "send(count=8, f32, peer=1)", 0.0, tid=1001,
                 peer=1, ranks=[0, 1])
        if r == 1:
            x("matmul", "op", S + 40000, 3000.0, shapes="[4,8] [8,16]", device="cpu")
            compute += 3000
            coll("recv", "p01", 0, S + 40500, S + 42000, 32, "recv(count=8, f32, peer=0)", 0.0, tid=1001,
                 peer=0, ranks=[0, 1])
            x("wait", "wait", S + 41000, 1000.0, comm="p01", seq=0)  # inside the op: not exposed
        x("redistribute", "redistribute", S + 45000, 1000.0, tid=1002, shape="[8, 4]", plan="S(0),R -> R,R")
        x("wait_reduce", "fsdp", S + 46000, 500.0, group="layers.0")
        exposed += 500
        if r == 3 and k == 3:
            x("wait", "wait", S + 47000, 500.0, comm="w", seq=99)
            exposed += 500
        exp[k] = {"step": STEP_US, "compute": compute, "exposed": exposed, "idle": STEP_US - compute - exposed}
    dropped = 5 if r == 3 else 0
    n = sum(1 for e in ev if e["ph"] == "X")
    doc = {"traceEvents": ev, "displayTimeUnit": "ms",
           "dtensor": {"version": 1, "rank": r, "world_size": world, "pid": 4000 + r, "host": "testhost",
                       "clock": {"offset_ns": 1234 * r, "uncertainty_ns": 20000 if r else -1, "reference_rank": 0},
                       "events": n, "dropped": dropped, "capacity": 100 if dropped else 65536}}
    return doc, exp, colls


def write_ranks(folder, ranks=range(WORLD)):
    os.makedirs(folder, exist_ok=True)
    docs, exps, colls = {}, {}, {}
    for r in ranks:
        docs[r], exps[r], colls[r] = gen_rank(r)
        with open(os.path.join(folder, f"rank-{r:05d}.trace.json"), "w") as f:
            json.dump(docs[r], f)
    return docs, exps, colls


def expected_collectives(colls):
    kinds = {}
    for r, cs in colls.items():
        for kind, comm, seq, ts, dur, nbytes, exposed in cs:
            k = kinds.setdefault(kind, {"count": 0, "calls": set(), "bytes": 0, "total": 0.0, "exposed": 0.0})
            k["count"] += 1
            k["calls"].add((comm, seq) if seq > 0 else (comm, seq, r, ts))
            k["bytes"] += nbytes
            k["total"] += dur
            k["exposed"] += exposed
    return kinds


# ---------------------------------------------------------------------------------------------------------------

def check_summary(tmp):
    d = os.path.join(tmp, "run")
    docs, exps, colls = write_ranks(d)
    p = dttrace("summary", d, "--json")
    check(p.returncode == 0, "summary --json runs", p)
    if p.returncode != 0:
        return d, docs
    s = json.loads(p.stdout)
    check(s["world_size"] == 4 and s["ranks"] == [0, 1, 2, 3] and s["missing_ranks"] == [], "4 of 4 ranks", p)
    check(not s["whole_trace_as_one_step"] and [st["step"] for st in s["steps"]] == [1, 2, 3], "steps 1, 2, 3")
    check(s["dropped"] == [{"rank": 3, "dropped": 5, "capacity": 100}], f"rank 3's dropped events: {s['dropped']}")
    check(close(s["clock_uncertainty_us"], 20.0), "the clock uncertainty (the largest of the ranks' estimated)")
    check(s["cuda_op_ranks"] == [], "no CUDA ops")
    for st in s["steps"]:
        k = st["step"]
        check([x["rank"] for x in st["ranks"]] == [0, 1, 2, 3], f"step {k}: a row per rank")
        for x in st["ranks"]:
            e = exps[x["rank"]][k]
            got = (x["step_us"], x["compute_us"], x["exposed_comm_us"], x["idle_us"])
            want = (e["step"], e["compute"], e["exposed"], e["idle"])
            check(all(close(g, w) for g, w in zip(got, want)),
                  f"step {k} rank {x['rank']}: step/compute/exposed/idle {got} == {want}")
            check(close(x["start_us"], step_start(k)) and x["tid"] == 1, f"step {k} rank {x['rank']}: start, tid")
            check(x["incomplete"] == (x["rank"] == 3 and k == 1),
                  f"step {k} rank {x['rank']}: incomplete {x['incomplete']} (rank 3 dropped events before step 2)")
    want = expected_collectives(colls)
    got = {k["kind"]: k for k in s["collectives"]}
    check(set(got) == set(want), f"collective kinds {sorted(got)}")
    for kind, w in want.items():
        g = got.get(kind)
        if g is None:
            continue
        hidden = 1.0 - w["exposed"] / w["total"]
        check(g["count"] == w["count"] and g["calls"] == len(w["calls"]) and g["bytes"] == w["bytes"],
              f"{kind}: count {g['count']}, calls {g['calls']}, bytes {g['bytes']} == "
              f"{w['count']}, {len(w['calls'])}, {w['bytes']}")
        check(close(g["total_us"], w["total"]) and close(g["exposed_us"], w["exposed"]) and
              abs(g["hidden_share"] - hidden) < 1e-6,
              f"{kind}: total {g['total_us']} exposed {g['exposed_us']} hidden {g['hidden_share']:.4f} == "
              f"{w['total']}, {w['exposed']}, {hidden:.4f}")
    check(close(s["unmatched_wait_us"], 500.0), f"the wait on a call in no file: {s['unmatched_wait_us']} us")

    st = s["stragglers"]
    check(st is not None and st["calls"] == 2 * STEPS and st["calls_over_threshold"] == STEPS,
          f"stragglers: {2 * STEPS} group calls, {STEPS} with a lag over 1 ms")
    worst = st["worst"]
    check(len(worst) == 2 * STEPS, "the worst list holds every call (fewer than 10)")
    check([(c["kind"], c["seq"], c["last_rank"], c["first_rank"], c["step"]) for c in worst[:STEPS]] ==
          [("all_reduce", 2 * k - 1, 2, 0, k) for k in range(1, STEPS + 1)] and
          all(close(c["lag_us"], 5000.0) for c in worst[:STEPS]) and
          all(c["signature"] == AR_SIG for c in worst[:STEPS]),
          "the worst calls: every all_reduce, rank 2 last by 5 ms, rank 0 first")
    check(all(c["kind"] == "all_gather" and close(c["lag_us"], 30.0) and c["last_rank"] == 3
              for c in worst[STEPS:]), "then the all_gathers: rank 3 last by 30 us")
    check(st["last"] == [{"rank": 2, "calls": STEPS}], f"last to arrive over the threshold: {st['last']}")
    check([(x["step"], x["straggler"], x["most_compute"], x["calls"]) for x in st["per_step"]] ==
          [(k, 2, 3, 1) for k in range(1, STEPS + 1)], f"per step: straggler 2, most compute 3: {st['per_step']}")
    check(st["slow_ranks"] == [{"rank": 2, "straggler_steps": 3, "most_compute_steps": 0, "steps": 3},
                               {"rank": 3, "straggler_steps": 0, "most_compute_steps": 3, "steps": 3}],
          f"slow on most steps: ranks 2 (last) and 3 (compute): {st['slow_ranks']}")

    # A higher threshold: no call counts, rank 3 is still named for its compute (5.5 ms over the median).
    p = dttrace("summary", d, "--json", "--threshold-ms", "6", "--top", "2")
    s2 = json.loads(p.stdout) if p.returncode == 0 else {}
    st2 = s2.get("stragglers") or {}
    check(st2.get("calls_over_threshold") == 0 and len(st2.get("worst", [])) == 2 and
          [x["rank"] for x in st2.get("slow_ranks", [])] == [], "--threshold-ms 6 --top 2: nothing over 6 ms", p)

    # The text form.
    p = dttrace("summary", d)
    check(p.returncode == 0 and "Slow on most steps: rank 2" in p.stdout and "Slow on most steps: rank 3" in
          p.stdout and "all_reduce" in p.stdout and "rank 3 dropped 5 events" in p.stdout, "the text form", p)
    check("rank 3 dropped 5 events" in p.stderr, "a warning about the dropped events on stderr", p)
    return d, docs


def write_one_rank(d, ev):
    """The rank file of a one-process trace holding the events `ev` (clock not estimated, nothing dropped)."""
    with open(os.path.join(d, "rank-00000.trace.json"), "w") as f:
        json.dump({"traceEvents": ev, "displayTimeUnit": "ms",
                   "dtensor": {"version": 1, "rank": 0, "world_size": 1, "pid": 1, "host": "h",
                               "clock": {"offset_ns": 0, "uncertainty_ns": -1, "reference_rank": 0},
                               "events": sum(e["ph"] == "X" for e in ev), "dropped": 0, "capacity": 1024}}, f)


def check_gpu_spans(tmp):
    """A CUDA rank with GPU spans (category gpu, on a stream's track): the kernels' time is compute, a host wait
    under a kernel is not exposed, and no note about launch-only spans."""
    d = os.path.join(tmp, "gpu")
    os.makedirs(d)
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
          {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1003, "args": {"name": "cuda:0 stream 0x1"}},
          {"ph": "X", "name": "step", "cat": "step", "ts": 0.0, "dur": 6000.0, "pid": 0, "tid": 1,
           "args": {"step": 1}},
          {"ph": "X", "name": "matmul", "cat": "op", "ts": 0.0, "dur": 50.0, "pid": 0, "tid": 1,
           "args": {"shapes": "[64,64] [64,64]", "device": "cuda:0"}},
          {"ph": "X", "name": "matmul", "cat": "gpu", "ts": 100.0, "dur": 5000.0, "pid": 0, "tid": 1003,
           "args": {"shapes": "[64,64] [64,64]", "device": "cuda:0"}},
          {"ph": "X", "name": "all_reduce", "cat": "collective", "ts": 60.0, "dur": 5140.0, "pid": 0, "tid": 1000,
           "args": {"comm": "c0", "seq": 1, "bytes": 4, "ranks": [0], "rank_in_comm": 0, "peer": -1, "ok": True,
                    "signature": "all_reduce(count=1, f32, sum)"}},
          {"ph": "X", "name": "wait", "cat": "wait", "ts": 200.0, "dur": 5000.0, "pid": 0, "tid": 1,
           "args": {"comm": "c0", "seq": 1}}]
    write_one_rank(d, ev)
    p = dttrace("summary", d, "--json")
    s = json.loads(p.stdout) if p.returncode == 0 else None
    check(s is not None and s["cuda_op_ranks"] == [], "GPU spans: no note about launch-only CUDA spans", p)
    if s:
        x = s["steps"][0]["ranks"][0]
        check(all(close(g, w) for g, w in zip((x["step_us"], x["compute_us"], x["exposed_comm_us"], x["idle_us"]),
                                              (6000, 5050, 100, 850))),
              f"GPU spans: compute is the launch and the kernel, a wait under the kernel is not exposed {x}")
    p = dttrace("summary", d)
    check(p.returncode == 0 and "cover the launch" not in p.stdout, "GPU spans: the text form has no launch note", p)


def check_one_rank(tmp):
    d = os.path.join(tmp, "one")
    os.makedirs(d)
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
          {"ph": "X", "name": "matmul", "cat": "op", "ts": 0.0, "dur": 1000.0, "pid": 0, "tid": 1, "args": {}},
          {"ph": "X", "name": "all_reduce", "cat": "collective", "ts": 900.0, "dur": 600.0, "pid": 0, "tid": 1000,
           "args": {"comm": "c0", "seq": 1, "bytes": 4, "ranks": [0], "rank_in_comm": 0, "peer": -1, "ok": True,
                    "signature": "all_reduce(count=1, f32, sum)"}},
          {"ph": "X", "name": "wait", "cat": "wait", "ts": 1000.0, "dur": 500.0, "pid": 0, "tid": 1,
           "args": {"comm": "c0", "seq": 1}},
          {"ph": "X", "name": "relu", "cat": "op", "ts": 2000.0, "dur": 500.0, "pid": 0, "tid": 1,
           "args": {"shapes": "[8]", "device": "cuda:0"}},
          # A failed call, and a wait that no longer knew its call's seq (-1: it left the flight recorder's ring).
          {"ph": "X", "name": "all_reduce", "cat": "collective", "ts": 3000.0, "dur": 600.0, "pid": 0, "tid": 1000,
           "args": {"comm": "c0", "seq": 2, "bytes": 4, "ranks": [0], "rank_in_comm": 0, "peer": -1, "ok": False,
                    "signature": "all_reduce(count=1, f32, sum)"}},
          {"ph": "X", "name": "wait", "cat": "wait", "ts": 3100.0, "dur": 200.0, "pid": 0, "tid": 1,
           "args": {"comm": "c0", "seq": -1}}]
    write_one_rank(d, ev)
    p = dttrace("summary", d, "--json")
    s = json.loads(p.stdout) if p.returncode == 0 else None
    check(s is not None and s["whole_trace_as_one_step"] and [x["step"] for x in s["steps"]] == ["all"] and
          s["stragglers"] is None and s["clock_uncertainty_us"] is None and s["cuda_op_ranks"] == [0],
          "1 rank without step spans: one step \"all\", no straggler section, no clock estimate, a CUDA op", p)
    if s:
        x = s["steps"][0]["ranks"][0]
        check(all(close(g, w) for g, w in zip((x["step_us"], x["compute_us"], x["exposed_comm_us"], x["idle_us"]),
                                              (3600, 1500, 700, 1400))), f"1 rank: the whole trace's figures {x}")
        ar = s["collectives"][0]
        check(ar["kind"] == "all_reduce" and ar["count"] == 2 and ar["failed"] == 1 and
              close(ar["exposed_us"], 700) and abs(ar["hidden_share"] - 5 / 12) < 1e-9,
              f"1 rank: 2 all_reduces, 1 failed, 5/12 hidden (a wait of seq -1 matched by overlap): {ar}")
        check(close(s["unmatched_wait_us"], 0), "1 rank: every wait matched")
    p = dttrace("summary", d)
    check(p.returncode == 0 and "Stragglers" not in p.stdout and "\"all\"" in p.stdout and
          "cover the launch" in p.stdout and "failed calls (ok false): 1 all_reduce" in p.stdout,
          "1 rank: the text form (with the notes on CUDA spans and the failed call)", p)
    return d


def check_event_schema(e, where):
    """The Chrome trace event format's requirements on the events dttrace writes."""
    if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
        return f"{where}: no ph"
    num = (int, float)
    if e["ph"] == "X":
        for k in ("name", "ts", "dur", "pid", "tid"):
            if k not in e:
                return f"{where}: X without {k}"
        if not isinstance(e["name"], str) or not isinstance(e["ts"], num) or isinstance(e["ts"], bool):
            return f"{where}: name or ts of the wrong type"
        if not isinstance(e["dur"], num) or e["dur"] < 0:
            return f"{where}: dur {e['dur']}"
        if not isinstance(e["pid"], int) or not isinstance(e["tid"], int):
            return f"{where}: pid/tid not integers"
        if "args" in e and not isinstance(e["args"], dict):
            return f"{where}: args not an object"
    elif e["ph"] == "M":
        if not isinstance(e.get("name"), str) or not isinstance(e.get("args"), dict) or "pid" not in e:
            return f"{where}: M without name, args or pid"
    if "ts" in e and (not isinstance(e["ts"], num) or isinstance(e["ts"], bool)):
        return f"{where}: ts not numeric"
    return None


def check_merge(tmp, d, docs):
    out = os.path.join(tmp, "merged.json")
    p = dttrace("merge", d, "-o", out)
    check(p.returncode == 0 and os.path.exists(out), "merge runs", p)
    if p.returncode != 0:
        return
    m = json.load(open(out))
    check(isinstance(m.get("traceEvents"), list) and m.get("displayTimeUnit") == "ms", "a Chrome trace object")
    problems = [x for x in (check_event_schema(e, f"traceEvents[{i}]") for i, e in enumerate(m["traceEvents"])) if x]
    check(not problems, f"the Chrome trace event schema: {problems[:3]}")
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    want = collections.Counter(key(e) for r in docs for e in docs[r]["traceEvents"])
    have = collections.Counter(key(e) for e in m["traceEvents"])
    check(not (want - have), f"every event of every rank is in the merged trace ({sum((want - have).values())} "
          "missing)")
    xs = [e for e in m["traceEvents"] if e["ph"] == "X"]
    check(len(xs) == sum(1 for r in docs for e in docs[r]["traceEvents"] if e["ph"] == "X"), "no extra spans")
    check({e["pid"] for e in m["traceEvents"]} == {0, 1, 2, 3}, "pids 0..3 (a process per rank)")
    for name in ("process_name", "process_sort_index"):
        pids = [e["pid"] for e in m["traceEvents"] if e["ph"] == "M" and e["name"] == name]
        check(sorted(pids) == [0, 1, 2, 3], f"one {name} per rank")
    check([b["rank"] for b in m["dtensor"]["ranks"]] == [0, 1, 2, 3] and
          m["dtensor"]["ranks"][1] == docs[1]["dtensor"], "the ranks' dtensor blocks under dtensor.ranks")
    check("rank 3 dropped 5 events" in p.stderr, "merge warns about the dropped events", p)

    # A missing rank: a warning naming it, still a trace.
    d2 = os.path.join(tmp, "run-missing")
    shutil.copytree(d, d2)
    os.remove(os.path.join(d2, "rank-00001.trace.json"))
    p = dttrace("merge", d2, "-o", os.path.join(tmp, "m2.json"))
    check(p.returncode == 0 and "no file for rank 1 of world size 4" in p.stderr, "merge warns of rank 1 missing", p)
    m2 = json.load(open(os.path.join(tmp, "m2.json")))
    check({e["pid"] for e in m2["traceEvents"]} == {0, 2, 3} and m2["dtensor"]["missing_ranks"] == [1],
          "the merged trace without rank 1 says so")


def check_bad_input(tmp, d):
    p = dttrace("summary", os.path.join(tmp, "nowhere"))
    check(p.returncode != 0 and "nowhere" in p.stderr and p.stderr.startswith("dttrace: "),
          "a missing folder: refused, naming it", p)
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    p = dttrace("merge", empty, "-o", os.path.join(tmp, "x.json"))
    check(p.returncode != 0 and "rank-NNNNN.trace.json" in p.stderr, "a folder without rank files: refused", p)

    def damaged(name, mutate):
        d2 = os.path.join(tmp, name)
        shutil.copytree(d, d2)
        path = os.path.join(d2, "rank-00002.trace.json")
        mutate(path)
        return d2

    def truncate(path):
        text = open(path).read()
        open(path, "w").write(text[:len(text) // 2])

    def version(path):
        doc = json.load(open(path))
        doc["dtensor"]["version"] = 2
        json.dump(doc, open(path, "w"))

    def bad_event(path):
        doc = json.load(open(path))
        next(e for e in doc["traceEvents"] if e["ph"] == "X").pop("ts")
        json.dump(doc, open(path, "w"))

    def wrong_rank(path):
        doc = json.load(open(path))
        doc["dtensor"]["rank"] = 1
        json.dump(doc, open(path, "w"))

    for name, mutate, words in (("malformed", truncate, ["not valid JSON"]), ("version", version, ["version 2"]),
                                ("bad-event", bad_event, ["traceEvents[", "ts"]),
                                ("wrong-rank", wrong_rank, ["rank 2", "dtensor.rank is 1"])):
        d2 = damaged(name, mutate)
        for cmd in (["summary", d2], ["merge", d2, "-o", os.path.join(tmp, name + ".json")]):
            p = dttrace(*cmd)
            check(p.returncode != 0 and "rank-00002.trace.json" in p.stderr and all(w in p.stderr for w in words)
                  and "Traceback" not in p.stderr, f"{name}: dttrace {cmd[0]} refuses, naming the file", p)


# ---------------------------------------------------------------------------------------------------------------
# Flight-recorder dumps.

def fr_entry(i, seq, kind="all_reduce", sig=AR_SIG, state="completed", age=None, peer=-1):
    return {"id": i, "seq": seq, "kind": kind, "signature": sig, "state": state,
            "age_s": age if age is not None else 10.0 - seq, "peer": peer}


def write_dumps(folder, per_rank, world=4, reason="timeout: all_reduce on comm w after 600 s"):
    os.makedirs(folder, exist_ok=True)
    for r, comms in per_rank.items():
        with open(os.path.join(folder, f"fr-rank-{r:05d}.json"), "w") as f:
            json.dump({"rank": r, "world_size": world, "reason": reason,
                       "communicators": [{"comm": uid, "ranks": ranks, "rank_in_comm": ranks.index(r),
                                          "entries": entries} for uid, ranks, entries in comms]}, f)


def check_fr(tmp):
    # Ranks 0, 2, 3 issued #7 (pending), rank 1 stopped after #6; ranks 0 and 1 also have a p2p communicator.
    d = os.path.join(tmp, "fr")
    per = {}
    for r in range(4):
        last = 6 if r == 1 else 7
        entries = [fr_entry(s, s, state="issued" if s == 7 else "completed") for s in range(1, last + 1)]
        comms = [("w", [0, 1, 2, 3], entries)]
        if r in (0, 1):
            comms.append(("p01", [0, 1], [fr_entry(1, 0, "send" if r == 0 else "recv",
                                                   "send(count=8, f32, peer=1)" if r == 0 else
                                                   "recv(count=8, f32, peer=0)", age=20.0, peer=1 - r)]))
        per[r] = comms
    write_dumps(d, per)
    p = dttrace("fr", d)
    want = (f"rank 1 is behind on comm w: it has not reached #7 {AR_SIG}, which ranks 0, 2, 3 issued; its last "
            f"call: #6 {AR_SIG} completed")
    check(p.returncode == 0 and want in p.stdout, "fr names rank 1 and the call it never issued", p)
    check(not any(f"rank {r} is behind" in p.stdout for r in (0, 2, 3)) and "left no dump" not in p.stdout and
          "mismatch" not in p.stdout, "fr: no one else behind, no missing dump, no mismatch", p)
    check("What each rank was doing" in p.stdout and "send(count=8, f32, peer=1)" not in
          p.stdout.split("What each rank was doing")[1].split("rank 1")[0], "the last 3 calls per rank", p)
    p = dttrace("fr", d, "--json")
    rep = json.loads(p.stdout) if p.returncode == 0 else {}
    w = next((c for c in rep.get("communicators", []) if c["comm"] == "w"), {})
    check([(b["rank"], b["missing_seq"], b["missing_signature"], b["issued_by"], b["last_seq"])
           for b in w.get("behind", [])] == [(1, 7, AR_SIG, [0, 2, 3], 6)] and
          w.get("furthest", {}).get("seq") == 7, "fr --json: rank 1 behind at #7 on comm w", p)
    check([[c["seq"] for c in x["last_calls"]] for x in rep.get("ranks_doing", [])] ==
          [[5, 6, 7], [4, 5, 6], [5, 6, 7], [5, 6, 7]], "fr --json: each rank's last 3 calls", p)

    # Rank 3 died: no dump.
    os.remove(os.path.join(d, "fr-rank-00003.json"))
    p = dttrace("fr", d)
    check(p.returncode == 0 and "rank 3 left no dump: dead or not timed out" in p.stdout, "fr names the dead rank",
          p)

    # A mismatch at #5: rank 2 issued an all_gather where the others issued the all_reduce.
    d = os.path.join(tmp, "fr-mismatch")
    per = {}
    for r in range(4):
        entries = [fr_entry(s, s) for s in range(1, 5)]
        entries.append(fr_entry(5, 5, "all_gather", AG_SIG, "issued") if r == 2 else fr_entry(5, 5, state="issued"))
        per[r] = [("w", [0, 1, 2, 3], entries)]
    write_dumps(d, per)
    p = dttrace("fr", d)
    check(p.returncode == 0 and f"collective mismatch on comm w at #5: ranks 0, 1, 3 issued {AR_SIG}; rank 2 "
          f"issued {AG_SIG}" in p.stdout, "fr names a collective mismatch and both signatures", p)
    p = dttrace("fr", d, "--json")
    rep = json.loads(p.stdout) if p.returncode == 0 else {}
    mm = rep.get("communicators", [{}])[0].get("mismatches", [])
    check(len(mm) == 1 and mm[0]["seq"] == 5 and {s["signature"] for s in mm[0]["signatures"]} == {AR_SIG, AG_SIG},
          "fr --json: the mismatch", p)

    check("still pending" not in p.stdout, "fr: a mismatched call is not reported as merely pending", p)

    # Every member issued #3 and it is pending everywhere: the hang is inside the call.
    d2 = os.path.join(tmp, "fr-pending")
    write_dumps(d2, {r: [("w", [0, 1, 2, 3], [fr_entry(s, s, state="issued" if s == 3 else "completed")
                                              for s in range(1, 4)])] for r in range(4)})
    p = dttrace("fr", d2)
    check(p.returncode == 0 and f"comm w: every member issued #3 {AR_SIG}, still pending on ranks 0, 1, 2, 3"
          in p.stdout and "behind" not in p.stdout, "fr: a call every member issued, pending everywhere", p)

    # Bad dumps.
    with open(os.path.join(d, "fr-rank-00001.json"), "w") as f:
        f.write("{\"rank\": 1,")
    p = dttrace("fr", d)
    check(p.returncode != 0 and "fr-rank-00001.json" in p.stderr, "fr: a malformed dump is named", p)
    p = dttrace("fr", os.path.join(tmp, "nowhere"))
    check(p.returncode != 0 and "nowhere" in p.stderr, "fr: a missing folder", p)


def check_plot(tmp, d, one):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"note: matplotlib is not importable by {sys.executable}: plot not drawn, only its error checked")
        p = dttrace("plot", d, "-o", os.path.join(tmp, "t.png"))
        check(p.returncode != 0 and "matplotlib" in p.stderr, "plot without matplotlib: a clear error", p)
        return
    for name, args in (("default", []), ("steps", ["--steps", "1:2"]), ("one", None)):
        png = os.path.join(tmp, f"timeline-{name}.png")
        p = dttrace("plot", one if args is None else d, "-o", png, *(args or []))
        ok = p.returncode == 0 and os.path.exists(png) and os.path.getsize(png) > 1000
        check(ok and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"plot {name}: a PNG of "
              f"{os.path.getsize(png) if os.path.exists(png) else 0} bytes", p)
    p = dttrace("plot", d, "-o", os.path.join(tmp, "t.png"), "--steps", "7:9")
    check(p.returncode != 0 and "no step" in p.stderr, "plot --steps outside the trace: refused", p)


with tempfile.TemporaryDirectory(prefix="dttrace_test_") as tmp:
    d, docs = check_summary(tmp)
    one = check_one_rank(tmp)
    check_merge(tmp, d, docs)
    check_gpu_spans(tmp)
    check_bad_input(tmp, d)
    check_fr(tmp)
    check_plot(tmp, d, one)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
