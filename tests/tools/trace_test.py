#!/usr/bin/env python3
"""DT_TRACE across processes: tests/tools/trace_helper under dtrun on 4 ranks (a 2x2 mesh).

- Traced, with rank 2's clock shifted by 5 s (DT_TRACE_CLOCK_SKEW_NS) and rank 1 reaching each step's all-reduce
  40 ms late: four rank files in the Chrome trace event format (every event checked against the format's fields);
  on every thread track of every rank the spans nest; every category the helper exercises is there (step, op,
  collective, wait, redistribute, user); rank 2's estimated offset recovers the 5 s skew within its stated
  uncertainty (the reference's reply is stamped between the two ends of the round trip, so the error is at most
  half of it); after alignment each all-reduce ends within 50 ms on every rank; rank 1 is the last to arrive at
  every all-reduce, by about 40 ms, as read from the files here and as `dttrace summary --json` reports it.
- Not traced: no file appears and each rank runs as many threads as when traced (tracing starts no thread).
- A skipped call (DT_FAULT_INJECT=1:all_reduce:3:skip, the rank takes the call's number and sends nothing): every
  rank times out and dumps its flight recorder into DT_FR_DIR, and `dttrace fr --json` names rank 1 as the rank that
  skipped the world's all-reduce, which ranks 0, 2 and 3 still wait on.

Usage: trace_test.py DTRUN TRACE_HELPER DTTRACE_PY
"""
import json
import os
import re
import subprocess
import sys
import tempfile

SKEW_NS = 5_000_000_000
SLOW_MS = 40
STEPS = 4
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def run(dtrun, helper, env_extra, args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_TRACE")}
    env.update(env_extra)
    r = subprocess.run([dtrun, "--nproc-per-node", "4", "--timeout", "90", helper, str(STEPS)] + args,
                       capture_output=True, text=True, env=env, timeout=110, cwd=cwd)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit(f"trace_helper failed with {r.returncode}")
    threads = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"threads (\d+) (\d+)", r.stdout)}
    return r, threads


def check_schema(path, doc):
    """The trace event format's fields (Chrome's spec): every event has ph, name and pid; X events ts, dur >= 0 and
    tid; M events args. Timestamps are numbers."""
    bad = []
    if not isinstance(doc.get("traceEvents"), list):
        return [f"{path}: no traceEvents array"]
    for i, e in enumerate(doc["traceEvents"]):
        where = f"{path}: event {i}"
        if not isinstance(e, dict) or e.get("ph") not in ("X", "M"):
            bad.append(f"{where}: ph {e.get('ph') if isinstance(e, dict) else e!r}")
            continue
        if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int):
            bad.append(f"{where}: name or pid")
        if e["ph"] == "X":
            if not all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")) or e["dur"] < 0:
                bad.append(f"{where}: ts/dur")
            if not isinstance(e.get("tid"), int) or not isinstance(e.get("cat"), str):
                bad.append(f"{where}: tid/cat")
            if not isinstance(e.get("args", {}), dict):
                bad.append(f"{where}: args")
        elif not isinstance(e.get("args"), dict):
            bad.append(f"{where}: metadata without args")
    return bad


def nesting_errors(events):
    """Spans on one thread track must nest: sorted by start (longest first on ties), each lies within the open
    span it starts in, or after it."""
    errors = []
    by_tid = {}
    for e in events:
        if e["ph"] == "X" and e["tid"] < 1000:
            by_tid.setdefault(e["tid"], []).append(e)
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            end = e["ts"] + e["dur"]
            while stack and e["ts"] >= stack[-1][1] - 1e-3:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-3:
                errors.append(f"tid {tid}: {e['name']} [{e['ts']}, {end}] crosses {stack[-1][0]} ending {stack[-1][1]}")
            stack.append((e["name"], end))
    return errors


def main(dtrun, helper, dttrace):
    dtrun, helper, dttrace = (os.path.abspath(p) for p in (dtrun, helper, dttrace))
    with tempfile.TemporaryDirectory(prefix="dt_trace_test_") as tmp:
        trace_dir = os.path.join(tmp, "trace")
        r, traced_threads = run(dtrun, helper, {"DT_TRACE": trace_dir},
                                ["--skew-rank", "2", "--skew-ns", str(SKEW_NS), "--slow-rank", "1",
                                 "--slow-ms", str(SLOW_MS)])
        check("tracing every rank to" in r.stderr, "rank 0 says it traces, with the clocks' uncertainty")
        files = sorted(os.listdir(trace_dir))
        check(files == [f"rank-{i:05d}.trace.json" for i in range(4)], f"four rank files ({files})")
        docs = {}
        for i in range(4):
            path = os.path.join(trace_dir, f"rank-{i:05d}.trace.json")
            with open(path) as f:
                docs[i] = json.load(f)
            bad = check_schema(path, docs[i])
            check(not bad, f"rank {i}: every event has the trace event format's fields" + (f": {bad[:3]}" if bad else ""))
            errors = nesting_errors(docs[i]["traceEvents"])
            check(not errors, f"rank {i}: spans nest on every thread track" + (f": {errors[:3]}" if errors else ""))
            cats = {e.get("cat") for e in docs[i]["traceEvents"] if e["ph"] == "X"}
            want = {"step", "op", "collective", "wait", "redistribute", "user"}
            check(want <= cats, f"rank {i}: categories {sorted(cats)} include {sorted(want)}")
            steps = [e["args"]["step"] for e in docs[i]["traceEvents"] if e.get("cat") == "step"]
            check(steps == list(range(1, STEPS + 1)), f"rank {i}: step spans {steps}")
            check(docs[i]["dtensor"]["dropped"] == 0, f"rank {i}: nothing dropped")

        clock = docs[2]["dtensor"]["clock"]
        error = clock["offset_ns"] + SKEW_NS
        check(0 <= clock["uncertainty_ns"] and abs(error) <= clock["uncertainty_ns"],
              f"rank 2's offset {clock['offset_ns']} ns recovers the skew -{SKEW_NS} ns within its uncertainty "
              f"{clock['uncertainty_ns']} ns (error {error} ns)")
        for i in (0, 1, 3):
            c = docs[i]["dtensor"]["clock"]
            check(abs(c["offset_ns"]) <= max(c["uncertainty_ns"], 0), f"rank {i}: offset {c['offset_ns']} ns within "
                  f"{c['uncertainty_ns']} ns (one host, one clock)")

        # The world's all-reduces, matched across ranks by (comm, seq).
        calls = {}
        for i, d in docs.items():
            for e in d["traceEvents"]:
                if e.get("cat") == "collective" and e["name"] == "all_reduce" and len(e["args"]["ranks"]) == 4:
                    calls.setdefault((e["args"]["comm"], e["args"]["seq"]), {})[i] = e
        world_calls = [c for c in calls.values() if len(c) == 4 and all(e["args"]["bytes"] == 4096 for e in c.values())]
        check(len(world_calls) == STEPS, f"the {STEPS} world all-reduces matched on all ranks by (comm, seq)")
        algorithms = {e["args"].get("algorithm") for c in world_calls for e in c.values()}
        check(algorithms and all(isinstance(a, str) and a for a in algorithms),
              f"the all-reduces name the algorithm that ran them ({sorted(algorithms)})")
        for c in world_calls:
            ends = [e["ts"] + e["dur"] for e in c.values()]
            check(max(ends) - min(ends) < 50_000, f"all-reduce #{c[0]['args']['seq']} ends within 50 ms on every "
                  f"rank after alignment (spread {(max(ends) - min(ends)) / 1e3:.2f} ms)")
            arrivals = {i: e["ts"] for i, e in c.items()}
            last = max(arrivals, key=arrivals.get)
            lag_ms = (arrivals[last] - min(arrivals.values())) / 1e3
            # Half the sleep at least: on a loaded machine (a sanitizer build, other jobs) the ranks' compute before the
            # sleep varies by tens of milliseconds too, so the lag of the last arrival is 40 ms give or take that.
            check(last == 1 and lag_ms >= 0.5 * SLOW_MS,
                  f"all-reduce #{c[0]['args']['seq']}: rank {last} arrives last, {lag_ms:.1f} ms after the first")

        # A threshold of 10 ms: on a loaded machine other calls lag by a few ms too, and would count.
        s = subprocess.run([sys.executable, dttrace, "summary", trace_dir, "--json", "--threshold-ms", "10"],
                           capture_output=True, text=True)
        check(s.returncode == 0, "dttrace summary --json runs" + ("" if s.returncode == 0 else ": " + s.stderr))
        if s.returncode == 0:
            st = json.loads(s.stdout)["stragglers"]
            late = [w for w in st["worst"] if w["kind"] == "all_reduce"]
            check(len(late) == STEPS and all(w["last_rank"] == 1 and w["lag_us"] >= 500 * SLOW_MS for w in late),
                  "dttrace summary: rank 1 is the straggler of every world all-reduce, by about 40 ms")
            check([r["rank"] for r in st["slow_ranks"]] == [1], f"dttrace summary: slow on most steps {st['slow_ranks']}")

        plain_dir = os.path.join(tmp, "plain")
        os.makedirs(plain_dir)
        _, plain_threads = run(dtrun, helper, {}, [], cwd=plain_dir)
        leftovers = os.listdir(plain_dir)
        check(not leftovers, "without DT_TRACE no trace file appears")
        check(plain_threads == traced_threads and len(plain_threads) == 4,
              f"without DT_TRACE each rank runs as many threads as traced ({plain_threads} and {traced_threads})")
        fr_dir = os.path.join(tmp, "fr")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DT_TRACE")}
        env.update({"DT_FR_DIR": fr_dir, "DT_FAULT_INJECT": "1:all_reduce:3:skip"})
        r3 = subprocess.run([dtrun, "--nproc-per-node", "4", "--timeout", "5", helper, str(STEPS)],
                            capture_output=True, text=True, env=env, timeout=60)
        check(r3.returncode != 0, "the job with a skipped call fails (times out)")
        dumps = sorted(os.listdir(fr_dir)) if os.path.isdir(fr_dir) else []
        check(dumps == [f"fr-rank-{i:05d}.json" for i in range(4)], f"every rank dumped its flight recorder ({dumps})")
        f = subprocess.run([sys.executable, dttrace, "fr", fr_dir, "--json"], capture_output=True, text=True)
        check(f.returncode == 0, "dttrace fr --json runs" + ("" if f.returncode == 0 else ": " + f.stderr))
        if f.returncode == 0:
            world = [c for c in json.loads(f.stdout)["communicators"] if c["ranks"] == [0, 1, 2, 3]]
            skipped = world[0].get("skipped", []) if len(world) == 1 else []
            check(len(skipped) == 1 and skipped[0]["rank"] == 1 and skipped[0]["waiting"] == [0, 2, 3]
                  and skipped[0]["signature"].startswith("all_reduce"),
                  f"dttrace fr names rank 1 as skipping the world's all-reduce that 0, 2, 3 wait on ({skipped})")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
