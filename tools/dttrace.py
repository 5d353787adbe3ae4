#!/usr/bin/env python3
"""dttrace: reads the per-rank span traces (DIR/rank-NNNNN.trace.json, Chrome trace event format) and the
flight-recorder dumps (DIR/fr-rank-NNNNN.json) that dtensor writes, and says where the time went and who hung.

  dttrace merge DIR [-o trace.json]       # one Chrome trace, a process per rank (Perfetto, chrome://tracing)
  dttrace summary DIR [--json] [--top N] [--threshold-ms MS]
                                          # per step and rank: compute, exposed communication, idle; per collective
                                          # kind: bytes, time, the share hidden behind compute; the stragglers
  dttrace plot DIR [-o timeline.png] [--steps A:B]   # a timeline of a few steps (needs matplotlib)
  dttrace fr DIR [--json]                 # after a collective timeout: who is behind on which communicator

Timestamps in the rank files are microseconds on rank 0's clock (the writer applied the measured offset), so the
ranks' spans compare directly; differences below the files' clock uncertainty (dtensor.clock.uncertainty_ns) mean
nothing. docs/observability.md describes the files and the figures. Standard library only, except `plot`.
"""
import argparse
import bisect
import json
import os
import re
import statistics
import sys

FORMAT_VERSION = 1
COMM_TID = 1000  # tracks that are not threads (communicators, redistribute) have tid >= 1000
COMPUTE_CATS = ("op", "optimizer")
RANK_FILE = re.compile(r"^rank-(\d{5,})\.trace\.json$")
FR_FILE = re.compile(r"^fr-rank-(\d{5,})\.json$")


def die(msg):
    sys.exit("dttrace: " + msg)


def warn(msg):
    sys.stderr.write("dttrace: warning: " + msg + "\n")


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def ranks_text(ranks):
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


# ---------------------------------------------------------------------------------------------------------------
# Loading and checking the rank files.

class Span:
    __slots__ = ("name", "cat", "ts", "dur", "tid", "args")

    def __init__(self, name, cat, ts, dur, tid, args):
        self.name, self.cat, self.ts, self.dur, self.tid, self.args = name, cat, ts, dur, tid, args

    @property
    def end(self):
        return self.ts + self.dur


class RankTrace:
    def __init__(self, path, meta, events):
        self.path = path
        self.meta = meta
        self.rank = meta["rank"]
        self.world_size = meta["world_size"]
        self.events = events  # as read, for merge
        self.spans = []
        self.thread_names = {}
        for e in events:
            if e["ph"] == "X":
                args = e.get("args") if isinstance(e.get("args"), dict) else {}
                self.spans.append(Span(e["name"], e.get("cat", ""), float(e["ts"]), float(e["dur"]), e["tid"], args))
            elif e["ph"] == "M" and e.get("name") == "thread_name":
                self.thread_names[e.get("tid")] = str(e.get("args", {}).get("name", ""))
        self.spans.sort(key=lambda s: (s.ts, -s.dur))
        self.dropped = int(meta.get("dropped", 0) or 0)
        # With a ring buffer that dropped its oldest events (in order of completion), a span that began before the
        # earliest retained completion may have lost children: such steps are marked incomplete.
        self.complete_from = min((s.end for s in self.spans if s.cat != "step"), default=None) \
            if self.dropped else None

    def uncertainty_us(self):
        clock = self.meta.get("clock") if isinstance(self.meta.get("clock"), dict) else {}
        u = clock.get("uncertainty_ns")
        return u / 1000.0 if is_num(u) and u >= 0 else None  # -1: not estimated (one process, no alignment)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        die(f"{path}: not valid JSON ({e})")
    except UnicodeDecodeError as e:
        die(f"{path}: not UTF-8 text ({e})")
    except OSError as e:
        die(f"{path}: cannot read it ({e.strerror})")


def check_dir(d):
    if not os.path.exists(d):
        die(f"{d} does not exist")
    if not os.path.isdir(d):
        die(f"{d} is not a directory")


def check_event(path, i, e):
    where = f"{path}: traceEvents[{i}]"
    if not isinstance(e, dict):
        die(f"{where} is not an object")
    ph = e.get("ph")
    if not isinstance(ph, str):
        die(f"{where} has no \"ph\"")
    if ph == "X":
        if not isinstance(e.get("name"), str):
            die(f"{where}: a complete event (ph X) without a name")
        for k in ("ts", "dur"):
            if not is_num(e.get(k)):
                die(f"{where} ({e['name']}): \"{k}\" is not a number")
        if e["dur"] < 0:
            die(f"{where} ({e['name']}): negative dur {e['dur']}")
        if not isinstance(e.get("tid"), int) or isinstance(e.get("tid"), bool):
            die(f"{where} ({e['name']}): \"tid\" is not an integer")
        if "args" in e and not isinstance(e["args"], dict):
            die(f"{where} ({e['name']}): \"args\" is not an object")


def check_rank_fields(path, d, rank_from_name, prefix):
    """d's "rank" and "world_size" are integers and the rank is the one the file's name says."""
    for k in ("rank", "world_size"):
        if not isinstance(d.get(k), int) or isinstance(d.get(k), bool):
            die(f"{path}: {prefix}{k} is missing or not an integer")
    if d["rank"] != rank_from_name:
        die(f"{path}: the file name says rank {rank_from_name} but {prefix}rank is {d['rank']}")


def load_rank_file(path, rank_from_name):
    doc = read_json(path)
    if not isinstance(doc, dict):
        die(f"{path}: not a dtensor trace (the top level is not an object)")
    meta = doc.get("dtensor")
    if not isinstance(meta, dict):
        die(f"{path}: not a dtensor trace (no \"dtensor\" block)")
    if meta.get("version") != FORMAT_VERSION:
        die(f"{path}: trace format version {meta.get('version')!r}; this dttrace reads version {FORMAT_VERSION}")
    check_rank_fields(path, meta, rank_from_name, "dtensor.")
    if not 0 <= meta["rank"] < meta["world_size"]:
        die(f"{path}: rank {meta['rank']} outside world size {meta['world_size']}")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        die(f"{path}: no \"traceEvents\" list")
    for i, e in enumerate(events):
        check_event(path, i, e)
    return RankTrace(path, meta, events)


def load_traces(d):
    """The rank files of DIR, by rank. Exits naming the file on any malformed one; warns (stderr) about dropped
    events and about ranks of 0..W-1 without a file."""
    check_dir(d)
    found = []
    for name in sorted(os.listdir(d)):
        m = RANK_FILE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(d, name)))
    if not found:
        die(f"{d} holds no rank-NNNNN.trace.json files")
    traces = {}
    for rank, path in found:
        traces[rank] = load_rank_file(path, rank)
    worlds = {t.world_size for t in traces.values()}
    if len(worlds) != 1:
        detail = ", ".join(f"{os.path.basename(t.path)}: {t.world_size}" for t in traces.values())
        die(f"{d}: the rank files disagree on the world size ({detail})")
    world = worlds.pop()
    missing = [r for r in range(world) if r not in traces]
    for t in traces.values():
        if t.dropped:
            warn(f"rank {t.rank} dropped {t.dropped} events ({os.path.basename(t.path)}: the ring buffer of "
                 f"{t.meta.get('capacity', '?')} kept only the newest): its earliest spans are missing")
    if missing:
        warn(f"{d}: no file for {ranks_text(missing)} of world size {world}")
    return traces, world, missing


# ---------------------------------------------------------------------------------------------------------------
# Interval arithmetic on sorted lists of disjoint [a, b) pairs.

def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return out


def clip(u, a, b):
    i = bisect.bisect_right(u, [a, float("inf")])
    if i > 0 and u[i - 1][1] > a:
        i -= 1
    out = []
    while i < len(u) and u[i][0] < b:
        x, y = max(u[i][0], a), min(u[i][1], b)
        if y > x:
            out.append([x, y])
        i += 1
    return out


def subtract(u, v):
    if not u:
        return []
    v = clip(v, u[0][0], u[-1][1])
    out = []
    j = 0
    for a, b in u:
        cur = a
        while j < len(v) and v[j][1] <= cur:
            j += 1
        k = j
        while k < len(v) and v[k][0] < b:
            if v[k][0] > cur:
                out.append([cur, v[k][0]])
            cur = max(cur, v[k][1])
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


def total(u):
    return sum(b - a for a, b in u)


# ---------------------------------------------------------------------------------------------------------------
# merge

def cmd_merge(a):
    traces, world, missing = load_traces(a.dir)
    out = a.output or os.path.join(a.dir, "trace.json")
    meta_events, spans, other = [], [], []
    for rank in sorted(traces):
        t = traces[rank]
        label = f"rank {rank}" + (f" ({t.dropped} events dropped)" if t.dropped else "")
        if not any(e["ph"] == "M" and e.get("name") == "process_sort_index" for e in t.events):
            meta_events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                                "args": {"sort_index": rank}})
        if t.dropped:
            meta_events.append({"ph": "M", "name": "process_labels", "pid": rank, "tid": 0,
                                "args": {"labels": f"{t.dropped} events dropped"}})
        has_name = False
        for e in t.events:
            e = dict(e)
            e["pid"] = rank  # a process per rank, whatever the writer put there
            if e["ph"] == "M":
                if e.get("name") == "process_name":
                    has_name = True
                meta_events.append(e)
            elif e["ph"] == "X":
                spans.append(e)
            else:
                other.append(e)
        if not has_name:
            meta_events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}})
    spans.sort(key=lambda e: (e["ts"], -e["dur"]))
    doc = {"traceEvents": meta_events + spans + other, "displayTimeUnit": "ms",
           "dtensor": {"version": FORMAT_VERSION, "world_size": world, "missing_ranks": missing,
                       "dropped": sum(t.dropped for t in traces.values()),
                       "ranks": [traces[r].meta for r in sorted(traces)]}}
    tmp = out + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, out)
    except OSError as e:
        die(f"cannot write {out} ({e.strerror})")
    print(f"dttrace merge: wrote {out}: {len(spans)} spans of {len(traces)} of {world} ranks"
          + (f", {sum(t.dropped for t in traces.values())} events dropped by the writers" if any(
              t.dropped for t in traces.values()) else ""))


# ---------------------------------------------------------------------------------------------------------------
# summary

def steps_of(t):
    """{step key: Span} of one rank (cat "step"); an int key when args.step is one."""
    out = {}
    for s in t.spans:
        if s.cat == "step":
            k = s.args.get("step", s.name)
            if k in out:
                warn(f"rank {t.rank}: step {k} appears twice in {os.path.basename(t.path)}; the first is used")
                continue
            out[k] = s
    return out


def is_blocked(s):
    """A span of a thread blocked on communication: a wait, or FSDP's wait_unshard / wait_reduce."""
    return s.cat == "wait" or (s.cat == "fsdp" and s.name.startswith("wait_"))


def main_tid(t):
    """Without step spans: the thread (not a communicator track) with the most op, optimizer and wait spans."""
    counts = {}
    for s in t.spans:
        if s.tid < COMM_TID and (s.cat in COMPUTE_CATS or is_blocked(s)):
            counts[s.tid] = counts.get(s.tid, 0) + 1
    if not counts:
        tids = sorted({s.tid for s in t.spans if s.tid < COMM_TID}) or sorted({s.tid for s in t.spans}) or [0]
        return tids[0]
    return min(counts, key=lambda tid: (-counts[tid], tid))


def rank_windows(traces):
    """{rank: {step key: (start, end, tid)}}; one step "all" per rank (its whole trace) when no rank has steps."""
    per = {r: steps_of(t) for r, t in traces.items()}
    if any(per.values()):
        for r, t in traces.items():
            if not per[r]:
                warn(f"rank {r} has no step spans ({os.path.basename(t.path)}); it is left out of the step table")
        return {r: {k: (s.ts, s.end, s.tid) for k, s in st.items()} for r, st in per.items()}, False
    out = {}
    for r, t in traces.items():
        if t.spans:
            out[r] = {"all": (min(s.ts for s in t.spans), max(s.end for s in t.spans), main_tid(t))}
        else:
            out[r] = {}
    return out, True


def step_sort_key(k):
    return (0, k, "") if is_num(k) else (1, 0, str(k))


class RankIndex:
    """Per rank: the compute and wait intervals by thread."""

    def __init__(self, t):
        comp, waits, gpu = {}, {}, []
        for s in t.spans:
            if s.cat == "gpu":  # CUDA work timed by events, on a stream's track: the rank computes then too
                gpu.append((s.ts, s.end))
            elif s.cat in COMPUTE_CATS:
                comp.setdefault(s.tid, []).append((s.ts, s.end))
            elif is_blocked(s):
                waits.setdefault(s.tid, []).append((s.ts, s.end))
        self.gpu = union(gpu)
        self.compute = {tid: union(v + gpu) for tid, v in comp.items()}
        self.waits = {tid: union(v) for tid, v in waits.items()}


def step_figures(t, idx, start, end, tid):
    compute = clip(idx.compute.get(tid, idx.gpu), start, end)
    waits = clip(idx.waits.get(tid, []), start, end)
    exposed = subtract(waits, compute)
    step = end - start
    c, x = total(compute), total(exposed)
    return {"rank": t.rank, "tid": tid, "start_us": start, "step_us": step, "compute_us": c,
            "exposed_comm_us": x, "idle_us": step - c - x,
            "incomplete": bool(t.complete_from is not None and start < t.complete_from)}


class OverlapIndex:
    """Spans by start, to find the one a time interval overlaps most."""

    def __init__(self, spans):
        self.spans = sorted(spans, key=lambda c: c.ts)
        self.starts = [c.ts for c in self.spans]
        self.longest = max((c.dur for c in self.spans), default=0.0)

    def best(self, a, b):
        """The span [a, b) overlaps most; if none, the last one that ended by a (a wait that began as it completed)."""
        target, most, before = None, 0.0, None
        i = bisect.bisect_left(self.starts, b)
        while i > 0 and self.starts[i - 1] >= a - self.longest:
            i -= 1
            c = self.spans[i]
            ov = min(c.end, b) - max(c.ts, a)
            if ov > most:
                most, target = ov, c
            elif c.end <= a and (before is None or c.end > before.end):
                before = c
        if target is None and before is None and i > 0:
            before = self.spans[i - 1]  # began before the window searched: ended before a
        return target or before


def collective_table(traces, indexes):
    """Per collective kind over all ranks: spans, calls, bytes, time, and the exposed (waited-on) part of it.

    A wait span names its call by (comm, seq): a group call (seq > 0) is found by both on the same rank; a send or
    recv (seq 0) is the one of that communicator's send/recv the wait overlaps most; a wait whose call had left the
    flight recorder's ring when it ended (seq -1, or none) is the call of that communicator it overlaps most."""
    kinds = {}
    calls = set()  # (kind, comm, seq) of the group calls; a send or recv (seq 0) is a call of its own
    unmatched = 0.0
    for r, t in traces.items():
        idx = indexes[r]
        colls = [s for s in t.spans if s.cat == "collective"]
        by_key, p2p, by_comm = {}, {}, {}
        for c in colls:
            comm, seq = str(c.args.get("comm", "")), c.args.get("seq", 0)
            by_comm.setdefault(comm, []).append(c)
            if is_num(seq) and seq > 0:
                by_key[(comm, seq)] = c
            else:
                p2p.setdefault(comm, []).append(c)
        p2p = {comm: OverlapIndex(cs) for comm, cs in p2p.items()}
        by_comm = {comm: OverlapIndex(cs) for comm, cs in by_comm.items()}
        exposed_of = {}  # id(collective) -> its exposed intervals
        for w in t.spans:
            if w.cat != "wait":
                continue
            pieces = subtract([[w.ts, w.end]], idx.compute.get(w.tid, []))
            comm, seq = str(w.args.get("comm", "")), w.args.get("seq")
            target = None
            if is_num(seq) and seq > 0:
                target = by_key.get((comm, seq))
            elif seq == 0:
                target = p2p[comm].best(w.ts, w.end) if comm in p2p else None
            elif comm in by_comm:
                target = by_comm[comm].best(w.ts, w.end)
            if target is None:
                unmatched += total(pieces)
                continue
            exposed_of.setdefault(id(target), []).extend(clip(pieces, target.ts, target.end))
        for c in colls:
            k = kinds.setdefault(c.name, {"kind": c.name, "count": 0, "calls": 0, "failed": 0, "bytes": 0,
                                          "total_us": 0.0, "exposed_us": 0.0})
            k["count"] += 1
            k["failed"] += c.args.get("ok") is False
            comm, seq = str(c.args.get("comm", "")), c.args.get("seq", 0)
            if is_num(seq) and seq > 0:
                calls.add((c.name, comm, seq))
            else:
                k["calls"] += 1
            b = c.args.get("bytes", 0)
            k["bytes"] += b if is_num(b) else 0
            k["total_us"] += c.dur
            k["exposed_us"] += total(union(exposed_of.get(id(c), [])))
    for name, _, _ in calls:
        kinds[name]["calls"] += 1
    rows = sorted(kinds.values(), key=lambda k: (-k["total_us"], k["kind"]))
    for k in rows:
        k["hidden_share"] = (1.0 - k["exposed_us"] / k["total_us"]) if k["total_us"] > 0 else None
    return rows, unmatched


class StepFinder:
    """The step whose window on a rank holds a time (the steps of one thread do not overlap)."""

    def __init__(self, windows):
        self.per = {}
        for r, w in windows.items():
            rows = sorted((a, b, k) for k, (a, b, _) in w.items())
            self.per[r] = ([x[0] for x in rows], rows)

    def __call__(self, rank, ts):
        starts, rows = self.per.get(rank, ([], []))
        i = bisect.bisect_right(starts, ts) - 1
        if i >= 0 and ts < rows[i][1]:
            return rows[i][2]
        return None


def stragglers(traces, windows, steps, threshold_us, top):
    groups = {}
    for r, t in traces.items():
        for s in t.spans:
            if s.cat != "collective":
                continue
            seq = s.args.get("seq", 0)
            if not (is_num(seq) and seq > 0):
                continue
            g = groups.setdefault((str(s.args.get("comm", "")), seq), {"kind": s.name,
                                                                        "signature": s.args.get("signature", ""),
                                                                        "arrivals": {}})
            g["arrivals"].setdefault(r, s.ts)
    step_of_time = StepFinder(windows)
    calls = []
    for (comm, seq), g in groups.items():
        arr = g["arrivals"]
        if len(arr) < 2:
            continue
        first = min(arr, key=lambda r: (arr[r], r))
        last = max(arr, key=lambda r: (arr[r], -r))
        step = None
        for r in [first] + sorted(arr):
            step = step_of_time(r, arr[r])
            if step is not None:
                break
        calls.append({"comm": comm, "seq": seq, "kind": g["kind"], "signature": g["signature"], "step": step,
                      "lag_us": arr[last] - arr[first], "last_rank": last, "first_rank": first,
                      "ranks": len(arr), "arrivals_us": [{"rank": r, "ts_us": arr[r]} for r in sorted(arr)]})
    calls.sort(key=lambda c: (-c["lag_us"], str(c["comm"]), c["seq"]))
    counted = [c for c in calls if c["lag_us"] > threshold_us]
    last_counts = {}
    for c in counted:
        last_counts[c["last_rank"]] = last_counts.get(c["last_rank"], 0) + 1
    counted_by_step = {}
    for c in counted:
        counted_by_step.setdefault(c["step"], []).append(c)
    per_step = []
    flagged = {}  # rank -> [straggler steps, most-compute steps]
    for st in steps:
        k = st["step"]
        in_step = counted_by_step.get(k, [])
        lc = {}
        for c in in_step:
            lc[c["last_rank"]] = lc.get(c["last_rank"], 0) + 1
        strag = next((r for r, n in lc.items() if n * 2 > len(in_step)), None)
        comp = {x["rank"]: x["compute_us"] for x in st["ranks"]}
        most = None
        if len(comp) >= 2:
            top_rank = min(comp, key=lambda r: (-comp[r], r))
            if comp[top_rank] - statistics.median(comp.values()) > threshold_us:
                most = top_rank
        per_step.append({"step": k, "calls": len(in_step), "last": [{"rank": r, "calls": n} for r, n in
                                                                    sorted(lc.items())],
                         "straggler": strag, "most_compute": most})
        if strag is not None:
            flagged.setdefault(strag, [0, 0])[0] += 1
        if most is not None:
            flagged.setdefault(most, [0, 0])[1] += 1
    nsteps = len(steps)
    slow = [{"rank": r, "straggler_steps": f[0], "most_compute_steps": f[1], "steps": nsteps}
            for r, f in sorted(flagged.items()) if f[0] * 2 > nsteps or f[1] * 2 > nsteps]
    return {"threshold_us": threshold_us, "calls": len(calls), "calls_over_threshold": len(counted),
            "worst": calls[:top], "last": [{"rank": r, "calls": n} for r, n in sorted(last_counts.items())],
            "per_step": per_step, "slow_ranks": slow}


def summarize(a):
    traces, world, missing = load_traces(a.dir)
    threshold_us = a.threshold_ms * 1000.0
    indexes = {r: RankIndex(t) for r, t in traces.items()}
    windows, whole = rank_windows(traces)
    keys = sorted({k for w in windows.values() for k in w}, key=step_sort_key)
    steps = []
    for k in keys:
        rows = [step_figures(traces[r], indexes[r], *windows[r][k]) for r in sorted(traces) if k in windows[r]]
        steps.append({"step": k, "ranks": rows})
    table, unmatched = collective_table(traces, indexes)
    s = {"dir": a.dir, "world_size": world, "ranks": sorted(traces), "missing_ranks": missing,
         "whole_trace_as_one_step": whole,
         "dropped": [{"rank": r, "dropped": t.dropped, "capacity": t.meta.get("capacity")}
                     for r, t in sorted(traces.items()) if t.dropped],
         "clock_uncertainty_us": max((u for u in (t.uncertainty_us() for t in traces.values()) if u is not None),
                                     default=None),
         "cuda_op_ranks": sorted(r for r, t in traces.items() if any(
             s.cat == "op" and str(s.args.get("device", "")).startswith("cuda") for s in t.spans)
             and not any(s.cat == "gpu" for s in t.spans)),
         "steps": steps, "collectives": table, "unmatched_wait_us": unmatched,
         "stragglers": stragglers(traces, windows, steps, threshold_us, a.top) if len(traces) >= 2 else None}
    return s


def ms(us):
    return f"{us / 1000.0:.3f}"


def human_bytes(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def print_summary(s):
    nsteps = len(s["steps"])
    print(f"dttrace summary: {s['dir']}: {len(s['ranks'])} of {s['world_size']} ranks, {nsteps} "
          f"step{'' if nsteps == 1 else 's'}"
          + (" (no step spans: the whole trace as one step \"all\")" if s["whole_trace_as_one_step"] else ""))
    if s["missing_ranks"]:
        print(f"  missing: no file for {ranks_text(s['missing_ranks'])}")
    if s["cuda_op_ranks"]:
        print(f"  note: {ranks_text(s['cuda_op_ranks'])} ran CUDA ops but recorded no GPU spans (a trace from an "
              "older dtensor): their op spans cover the launch, so compute is understated there")
    for d in s["dropped"]:
        print(f"  rank {d['rank']} dropped {d['dropped']} events (ring buffer of {d['capacity']}): its earliest "
              "spans are missing; steps marked * may lack spans")
    print()
    print("Steps (ms; compute = op + optimizer spans on the step's thread and GPU spans, exposed = wait + fsdp wait_* not "
          "under compute)")
    print(f"{'step':>8} {'rank':>5} {'step':>10} {'compute':>10} {'exposed':>10} {'idle':>10}  compute%")
    for st in s["steps"]:
        for i, x in enumerate(st["ranks"]):
            share = 100.0 * x["compute_us"] / x["step_us"] if x["step_us"] > 0 else 0.0
            print(f"{str(st['step']) if i == 0 else '':>8} {x['rank']:>5} {ms(x['step_us']):>10} "
                  f"{ms(x['compute_us']):>10} {ms(x['exposed_comm_us']):>10} {ms(x['idle_us']):>10}  "
                  f"{share:6.1f}%" + (" *" if x["incomplete"] else ""))
    print()
    print("Collectives (all ranks; hidden = share of their time not waited on)")
    if not s["collectives"]:
        print("  none")
    else:
        print(f"{'kind':<16} {'count':>7} {'calls':>7} {'bytes':>12} {'total ms':>11} {'exposed ms':>11} "
              f"{'hidden':>7}")
        for k in s["collectives"]:
            hidden = f"{100.0 * k['hidden_share']:6.1f}%" if k["hidden_share"] is not None else "     -"
            print(f"{k['kind']:<16} {k['count']:>7} {k['calls']:>7} {human_bytes(k['bytes']):>12} "
                  f"{ms(k['total_us']):>11} {ms(k['exposed_us']):>11} {hidden:>7}")
    failed = [f"{k['failed']} {k['kind']}" for k in s["collectives"] if k["failed"]]
    if failed:
        print(f"  failed calls (ok false): {', '.join(failed)}; `dttrace fr` reads the flight-recorder dumps")
    if s["unmatched_wait_us"] > 0:
        print(f"  {ms(s['unmatched_wait_us'])} ms of wait spans match no collective in the files (dropped events?)")
    st = s["stragglers"]
    if st is None:
        return
    print()
    print(f"Stragglers (arrival = issue time; {st['calls']} group calls on several ranks, {st['calls_over_threshold']}"
          f" with a lag over {ms(st['threshold_us'])} ms)")
    if s["clock_uncertainty_us"] is not None and s["clock_uncertainty_us"] * 2 > st["threshold_us"]:
        print(f"  note: the clock uncertainty is {ms(s['clock_uncertainty_us'])} ms; smaller lags mean nothing")
    if st["worst"]:
        print(f"{'comm':<12} {'seq':>6} {'step':>6} {'lag ms':>9} {'last':>5} {'first':>5}  call")
        for c in st["worst"]:
            step = "" if c["step"] is None else str(c["step"])
            print(f"{c['comm']:<12} {c['seq']:>6} {step:>6} {ms(c['lag_us']):>9} {c['last_rank']:>5} "
                  f"{c['first_rank']:>5}  {c['signature'] or c['kind']}")
    if st["last"]:
        print("Last to arrive (calls over the threshold): " +
              ", ".join(f"rank {x['rank']}: {x['calls']} of {st['calls_over_threshold']}" for x in st["last"]))
    if st["slow_ranks"]:
        for x in st["slow_ranks"]:
            why = []
            if x["straggler_steps"]:
                why.append(f"last at most collectives in {x['straggler_steps']} of {x['steps']} steps")
            if x["most_compute_steps"]:
                why.append(f"the most compute in {x['most_compute_steps']} of {x['steps']} steps")
            print(f"Slow on most steps: rank {x['rank']} ({'; '.join(why)})")
    else:
        print("Slow on most steps: no rank")


def cmd_summary(a):
    s = summarize(a)
    if a.json:
        json.dump(s, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_summary(s)


# ---------------------------------------------------------------------------------------------------------------
# plot

COLORS = {"step": "#e4e4e4", "op": "#1f77b4", "optimizer": "#17becf", "gpu": "#2ca02c", "collective": "#ff7f0e", "wait": "#d62728",
          "fsdp": "#2ca02c", "redistribute": "#9467bd", "checkpoint": "#8c564b", "user": "#7f7f7f",
          "other": "#bcbd22"}


def parse_steps(text):
    m = re.fullmatch(r"\s*(-?\d*)\s*(?::\s*(-?\d*)\s*)?", text or "")
    if not m or (m.group(1) == "" and m.group(2) is None):
        die(f"--steps {text!r}: expected A:B, A:, :B or A (step numbers, both ends included)")
    lo = int(m.group(1)) if m.group(1) else None
    hi = lo if m.group(2) is None else (int(m.group(2)) if m.group(2) else None)
    return lo, hi


def depths(spans):
    """Nesting depth of each span of one thread (spans nest properly)."""
    out, stack = [], []
    for s in spans:  # sorted by (ts, -dur)
        while stack and stack[-1] <= s.ts:
            stack.pop()
        out.append(len(stack))
        stack.append(s.end)
    return out


def cmd_plot(a):
    traces, world, missing = load_traces(a.dir)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        die("plot needs matplotlib, which is not installed for this python (" + sys.executable +
            "); ./dev deps puts it in build/py-venv")
    out = a.output or os.path.join(a.dir, "timeline.png")
    windows, whole = rank_windows(traces)
    keys = sorted({k for w in windows.values() for k in w}, key=step_sort_key)
    if whole or not keys:
        if a.steps:
            warn(f"{a.dir}: the files hold no step spans; --steps is ignored and the whole trace drawn")
        chosen = keys
    elif a.steps:
        lo, hi = parse_steps(a.steps)
        chosen = [k for k in keys if is_num(k) and (lo is None or k >= lo) and (hi is None or k <= hi)]
        if not chosen:
            die(f"{a.dir}: no step in --steps {a.steps} (the files hold steps {keys[0]} to {keys[-1]})")
    else:
        chosen = keys[-3:]
    bounds = [w[k] for w in windows.values() for k in chosen if k in w]
    if bounds:
        t0, t1 = min(b[0] for b in bounds), max(b[1] for b in bounds)
    else:
        all_spans = [s for t in traces.values() for s in t.spans]
        if not all_spans:
            die(f"{a.dir}: the rank files hold no spans to draw")
        t0, t1 = min(s.ts for s in all_spans), max(s.end for s in all_spans)
    # Lanes, top to bottom: per rank its threads (height 1) then its communicator tracks (thin).
    lanes, y = [], 0.0
    rank_blocks = []
    for r in sorted(traces):
        t = traces[r]
        tids = sorted({s.tid for s in t.spans if s.ts < t1 and s.end > t0} |
                      {w[2] for k, w in windows.get(r, {}).items() if k in chosen})
        threads = [tid for tid in tids if tid < COMM_TID]
        comms = [tid for tid in tids if tid >= COMM_TID]
        top = y
        for tid in threads + comms:
            h = 1.0 if tid < COMM_TID else 0.4
            name = t.thread_names.get(tid) or (f"tid {tid}" if tid < COMM_TID else f"comm track {tid}")
            lanes.append((r, tid, y, h, f"rank {r} {name}" if tid < COMM_TID else name))
            y += h + 0.1
        rank_blocks.append((r, top, y))
        y += 0.5
    height = max(y, 1.0)
    fig, ax = plt.subplots(figsize=(14, min(1.5 + 0.45 * height, 150.0)))  # Agg draws at most 2^16 pixels
    used = set()
    for r, tid, base, h, _ in lanes:
        spans = [s for s in traces[r].spans if s.tid == tid]
        dep = depths(spans)
        bars = {}
        for s, d in zip(spans, dep):
            if s.end <= t0 or s.ts >= t1:
                continue
            cat = s.cat if s.cat in COLORS else "other"
            used.add(cat)
            bars.setdefault((d, cat), []).append(((max(s.ts, t0) - t0) / 1000.0,
                                                  (min(s.end, t1) - max(s.ts, t0)) / 1000.0))
        for (d, cat), xs in sorted(bars.items()):
            hh = h * max(0.25, 1.0 - 0.18 * d)
            ax.broken_barh(xs, (base + (h - hh) / 2, hh), facecolors=COLORS[cat], edgecolor="none")
    marked = [] if whole else chosen  # the whole trace as one step has no boundaries to show
    for r, top, bottom in rank_blocks:
        for k in marked:
            w = windows.get(r, {}).get(k)
            if w is None:
                continue
            for x in (w[0], w[1]):
                ax.vlines((x - t0) / 1000.0, top - 0.05, bottom - 0.05, colors="black", linewidth=0.8,
                          linestyles="dashed")
    for k in marked:
        starts = [w[k][0] for w in windows.values() if k in w]
        if starts:
            ax.text((min(starts) - t0) / 1000.0, -0.15, f"step {k}", fontsize=8, va="bottom")
    ax.set_ylim(height, -0.6)
    ax.set_xlim(0, max((t1 - t0) / 1000.0, 1e-3))
    ax.set_yticks([base + h / 2 for _, _, base, h, _ in lanes])
    ax.set_yticklabels([label for *_, label in lanes], fontsize=7)
    ax.set_xlabel(f"ms from {t0 / 1000.0:.3f} ms (rank 0's clock)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=COLORS[c], label=c) for c in COLORS if c in used], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8)
    what = "the whole trace" if whole or not keys else (f"step {chosen[0]}" if len(chosen) == 1 else
                                                         f"steps {chosen[0]} to {chosen[-1]}")
    dropped = [r for r, t in traces.items() if t.dropped]
    ax.set_title(f"{os.path.basename(os.path.normpath(a.dir))}: {what}, {len(traces)} of {world} ranks" +
                 (f" ({ranks_text(dropped)} dropped events)" if dropped else ""), fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        die(f"cannot write {out} ({e.strerror})")
    print(f"dttrace plot: wrote {out} ({what}, {len(traces)} ranks)")


# ---------------------------------------------------------------------------------------------------------------
# fr: flight-recorder dumps

FR_STATES = ("completed", "issued", "failed", "skipped")


def load_dump(path, rank_from_name):
    doc = read_json(path)
    if not isinstance(doc, dict):
        die(f"{path}: not a flight-recorder dump (the top level is not an object)")
    check_rank_fields(path, doc, rank_from_name, "")
    comms = doc.get("communicators")
    if not isinstance(comms, list):
        die(f"{path}: no \"communicators\" list")
    for i, c in enumerate(comms):
        where = f"{path}: communicators[{i}]"
        if not isinstance(c, dict) or "comm" not in c or not isinstance(c.get("entries"), list):
            die(f"{where}: needs \"comm\" and an \"entries\" list")
        if not isinstance(c.get("ranks"), list) or not all(isinstance(r, int) for r in c["ranks"]):
            die(f"{where}: \"ranks\" is not a list of ranks")
        for j, e in enumerate(c["entries"]):
            if not isinstance(e, dict) or not is_num(e.get("seq")) or not isinstance(e.get("kind"), str):
                die(f"{where}.entries[{j}]: needs a numeric \"seq\" and a \"kind\"")
            if e.get("state") not in FR_STATES:
                die(f"{where}.entries[{j}]: state {e.get('state')!r} is none of {', '.join(FR_STATES)}")
        c["comm"] = str(c["comm"])
    return doc


def call_text(e):
    return f"#{e['seq']} {e.get('signature') or e['kind']}"


def analyze_fr(d):
    check_dir(d)
    dumps = {}
    for name in sorted(os.listdir(d)):
        m = FR_FILE.match(name)
        if m:
            dumps[int(m.group(1))] = load_dump(os.path.join(d, name), int(m.group(1)))
    if not dumps:
        die(f"{d} holds no fr-rank-NNNNN.json flight-recorder dumps")
    world = max(x["world_size"] for x in dumps.values())
    missing = [r for r in range(world) if r not in dumps]
    findings = [f"rank {r} left no dump: dead or not timed out" for r in missing]
    comms = {}
    for r, doc in sorted(dumps.items()):
        for c in doc["communicators"]:
            x = comms.setdefault(c["comm"], {"ranks": list(c["ranks"]), "members": {}})
            if list(c["ranks"]) != x["ranks"]:
                findings.append(f"comm {c['comm']}: rank {r} lists its ranks as {c['ranks']}, another dump as "
                                f"{x['ranks']}")
            x["members"][r] = c["entries"]
    out_comms = []
    for uid in sorted(comms):
        x = comms[uid]
        members = x["ranks"]
        by_seq = {}  # seq -> {rank: entry}
        for r, entries in x["members"].items():
            for e in entries:
                if e["seq"] > 0:
                    by_seq.setdefault(e["seq"], {})[r] = e
        last = {}
        for r, entries in x["members"].items():
            group = [e for e in entries if e["seq"] > 0]
            last[r] = max(group, key=lambda e: e["seq"]) if group else None
        furthest = max((e["seq"] for e in last.values() if e), default=None)
        info = {"comm": uid, "ranks": members, "furthest": None, "members": [], "behind": [], "mismatches": [],
                "missing": [r for r in members if r not in x["members"]], "failed": [], "pending": []}
        if furthest is not None:
            fe = next(iter(by_seq[furthest].values()))
            info["furthest"] = {"seq": furthest, "kind": fe["kind"], "signature": fe.get("signature", ""),
                                "issued_by": sorted(by_seq[furthest])}
        for r in members:
            e = last.get(r)
            entries = x["members"].get(r) or []
            latest = entries[-1] if entries else None  # oldest first: its latest call, send/recv included
            info["members"].append({"rank": r, "dumped": r in x["members"],
                                    "last_seq": e["seq"] if e else None,
                                    "last_state": e["state"] if e else None,
                                    "last_signature": (e.get("signature") or e["kind"]) if e else None,
                                    "latest_call": None if latest is None else {
                                        "seq": latest["seq"], "signature": latest.get("signature") or latest["kind"],
                                        "state": latest["state"], "peer": latest.get("peer", -1)}})
        for r in sorted(dumps):
            if r in members and r not in x["members"]:
                findings.append(f"comm {uid}: rank {r}'s dump does not list it, though the other members' dumps "
                                f"name rank {r} a member")
        if furthest is not None:
            for r in sorted(x["members"]):
                e = last[r]
                mine = e["seq"] if e else 0
                if mine >= furthest:
                    continue
                # The first call it has not reached that some member's window still shows.
                nxt = min((s for s in by_seq if s > mine), default=furthest)
                ne = next(iter(by_seq[nxt].values()))
                issued = sorted(by_seq[nxt])
                text = (f"rank {r} is behind on comm {uid}: it has not reached {call_text(ne)}, which "
                        f"{ranks_text(issued)} issued; its last call: "
                        + (f"{call_text(e)} {e['state']}" if e else "none on this communicator"))
                findings.append(text)
                info["behind"].append({"rank": r, "last_seq": e["seq"] if e else None,
                                       "missing_seq": nxt, "missing_signature": ne.get("signature") or ne["kind"],
                                       "issued_by": issued, "text": text})
        for seq in sorted(by_seq):
            sigs = {}
            for r, e in sorted(by_seq[seq].items()):
                sigs.setdefault(e.get("signature") or e["kind"], []).append(r)
            if len(sigs) > 1:
                text = (f"collective mismatch on comm {uid} at #{seq}: " +
                        "; ".join(f"{ranks_text(rs)} issued {sig}" for sig, rs in sigs.items()))
                findings.append(text)
                info["mismatches"].append({"seq": seq, "signatures": [{"signature": sig, "ranks": rs}
                                                                      for sig, rs in sigs.items()], "text": text})
        for r, entries in sorted(x["members"].items()):
            for e in entries:
                if e["state"] == "skipped":
                    waiting = sorted(q for q, f in by_seq.get(e["seq"], {}).items() if f["state"] == "issued")
                    text = (f"rank {r} skipped {call_text(e)} on comm {uid} (it took the call's number and sent "
                            f"nothing: fault injection)" + (f", which {ranks_text(waiting)} still wait on"
                                                            if waiting else ""))
                    findings.append(text)
                    info.setdefault("skipped", []).append({"rank": r, "seq": e["seq"], "waiting": waiting,
                                                           "signature": e.get("signature") or e["kind"],
                                                           "text": text})
                if e["state"] == "failed":
                    findings.append(f"rank {r}: {call_text(e)} on comm {uid} failed")
                    info["failed"].append({"rank": r, "seq": e["seq"], "signature": e.get("signature") or e["kind"]})
        if furthest is not None and not info["behind"] and not info["missing"] and \
                not any(m["seq"] == furthest for m in info["mismatches"]):
            pend = sorted(r for r, e in by_seq[furthest].items() if e["state"] == "issued")
            if pend:
                info["pending"] = pend
                findings.append(f"comm {uid}: every member issued {call_text(by_seq[furthest][pend[0]])}, still "
                                f"pending on {ranks_text(pend)}")
        out_comms.append(info)
    doing = []
    for r, doc in sorted(dumps.items()):
        calls = [dict(e, comm=c["comm"]) for c in doc["communicators"] for e in c["entries"]]
        calls.sort(key=lambda e: -(e.get("age_s") if is_num(e.get("age_s")) else 0.0))  # oldest first
        doing.append({"rank": r, "reason": doc.get("reason", ""),
                      "last_calls": [{"comm": e["comm"], "seq": e["seq"], "kind": e["kind"],
                                      "signature": e.get("signature", ""), "state": e["state"],
                                      "age_s": e.get("age_s"), "peer": e.get("peer", -1)} for e in calls[-3:]]})
    return {"dir": d, "world_size": world, "ranks": sorted(dumps), "missing_ranks": missing,
            "findings": findings, "communicators": out_comms, "ranks_doing": doing}


def cmd_fr(a):
    rep = analyze_fr(a.dir)
    if a.json:
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    print(f"dttrace fr: {a.dir}: dumps of {len(rep['ranks'])} of {rep['world_size']} ranks")
    print()
    if rep["findings"]:
        for f in rep["findings"]:
            print("* " + f)
    else:
        print("* every member of every communicator reached the same call; no mismatch")
    for c in rep["communicators"]:
        print()
        fur = c["furthest"]
        print(f"comm {c['comm']} (ranks {', '.join(map(str, c['ranks']))})" +
              (f": furthest call #{fur['seq']} {fur['signature'] or fur['kind']}" if fur
               else ": sends and receives only"))
        for m in c["members"]:
            if not m["dumped"]:
                print(f"  rank {m['rank']:>4}: no dump")
            elif m["last_seq"] is None:
                c = m["latest_call"]
                print(f"  rank {m['rank']:>4}: " + ("no call recorded" if c is None else
                                                     f"latest {c['signature']} {c['state']} (send/recv: not numbered)"))
            else:
                print(f"  rank {m['rank']:>4}: last #{m['last_seq']} {m['last_signature']} {m['last_state']}")
    print()
    print("What each rank was doing (its last 3 calls, oldest first):")
    for x in rep["ranks_doing"]:
        print(f"  rank {x['rank']}" + (f" ({x['reason']})" if x["reason"] else "") + ":")
        for e in x["last_calls"]:
            age = f", {e['age_s']:.3f} s ago" if is_num(e["age_s"]) else ""
            peer = f" peer {e['peer']}" if is_num(e["peer"]) and e["peer"] >= 0 else ""
            print(f"    comm {e['comm']} #{e['seq']} {e['signature'] or e['kind']}{peer}: {e['state']}{age}")


# ---------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(prog="dttrace", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("merge", help="one Chrome trace of every rank's events")
    p.add_argument("dir")
    p.add_argument("-o", "--output", help="the merged trace (default DIR/trace.json)")
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("summary", help="step time, compute, exposed communication, collectives, stragglers")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true", help="one JSON object (times in microseconds)")
    p.add_argument("--top", type=int, default=10, help="the worst N calls by lag (default 10)")
    p.add_argument("--threshold-ms", type=float, default=1.0,
                   help="a lag (or a compute excess over the median) counts above this (default 1 ms)")
    p.set_defaults(func=cmd_summary)
    p = sub.add_parser("plot", help="a timeline picture of a few steps (matplotlib)")
    p.add_argument("dir")
    p.add_argument("-o", "--output", help="the PNG (default DIR/timeline.png)")
    p.add_argument("--steps", help="A:B (both included), A:, :B or A; default the last 3 steps")
    p.set_defaults(func=cmd_plot)
    p = sub.add_parser("fr", help="the flight-recorder dumps: who is behind, mismatches, last calls")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_fr)
    a = ap.parse_args()
    if getattr(a, "top", 1) < 0:
        die("--top must be >= 0")
    a.func(a)


if __name__ == "__main__":
    main()
