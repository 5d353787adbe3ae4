#!/usr/bin/env python3
"""What the Python package adds to a redistribution against the same call in C++ (issue #18: at most 2 us on 2
processes), from two side-by-side measurements made in one session:

    bench/python_overhead.py BUILD_DIR [--sessions 3] [--nproc 2] [--python PYTHON]

- Python against C: examples/python/call_overhead.py (the Python loop and the same loop in C, alternating in one
  process), on the compiled fast paths and on ctypes alone (DTENSOR_NO_SPEEDUPS=1);
- C against C++: bench/c_api_overhead 4 4 (the same 4 x 4 float32 tensor, alternating in one process).

Sessions alternate the three runs. Python against C++ = (Python - C) + (C - C++) per case, path and clock, from the
medians of each run (and from the bests); the table gives the best and the median of that sum over the sessions, one
JSON line per row:
    {"bench":"python_vs_cpp","case":..,"ranks":..,"path":..,"clock":..,"added_us":..,"added_best_us":..,
     "python_vs_c_us":..,"c_vs_cpp_us":..}  (medians over the sessions; added_best_us: the best session's best)
Environment: the build's libdtensor.so and _speedups module (tests/python) are used; PYTHON defaults to the build
folder's py-venv (numpy), else this interpreter.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def json_rows(cmd, env, bench):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout}{r.stderr}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return [row for row in rows if row.get("bench") == bench]


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--python", default=None)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    venv_python = os.path.join(build, "py-venv", "bin", "python3")
    python = args.python or (venv_python if os.path.exists(venv_python) else sys.executable)
    speedups = [os.path.join(build, "tests", "python", f) for f in os.listdir(os.path.join(build, "tests", "python"))
                if f.startswith("_speedups") and f.endswith(".so")]
    env = dict(os.environ, DTENSOR_LIBRARY=os.path.join(build, "libdtensor.so"), OPENBLAS_NUM_THREADS="1")
    if speedups:
        env["DTENSOR_SPEEDUPS"] = speedups[0]
    env.pop("DTENSOR_NO_SPEEDUPS", None)
    dtrun = [os.path.join(build, "tools", "dtrun"), "--nproc-per-node", str(args.nproc)]
    example = os.path.join(ROOT, "examples", "python", "call_overhead.py")
    sums = {}  # (case, path, clock) -> [(added median, added best, python - c, c - cpp)] per session
    for session in range(args.sessions):
        runs = {"speedups": None, "ctypes": None, "cpp": None}
        order = list(runs) if session % 2 == 0 else list(runs)[::-1]
        for what in order:
            if what == "cpp":
                runs[what] = json_rows(dtrun + [os.path.join(build, "bench", "c_api_overhead"), "4", "4"], env,
                                       "c_api_overhead")
            else:
                e = dict(env, **({"DTENSOR_NO_SPEEDUPS": "1"} if what == "ctypes" else {}))
                runs[what] = json_rows(dtrun + [python, example], e, "python_call_overhead")
        cpp = {(r["case"], r["clock"]): r for r in runs["cpp"]}
        for path in ("speedups", "ctypes"):
            for r in runs[path]:
                c = cpp[(r["case"], r["clock"])]
                if r["added_us"] is None:
                    continue
                sums.setdefault((r["case"], r["path"], r["clock"]), []).append(
                    (r["added_us"] + c["added_us"], r["added_best_us"] + c["added_best_us"], r["added_us"],
                     c["added_us"]))
        print(f"session {session + 1}/{args.sessions} done", file=sys.stderr, flush=True)
    print(f"Python against C++: (Python - C, call_overhead.py) + (C - C++, c_api_overhead), {args.nproc} processes, "
          f"4x4 float32, {args.sessions} sessions; us per call")
    print(f"{'case':22s} {'path':9s} {'clock':5s} {'added best':>10s} {'median':>7s} {'Py-C':>6s} {'C-C++':>6s}")
    for (case, path, clock), v in sums.items():
        added, best = median([x[0] for x in v]), min(x[1] for x in v)
        pc, cc = median([x[2] for x in v]), median([x[3] for x in v])
        print(f"{case:22s} {path:9s} {clock:5s} {best:10.2f} {added:7.2f} {pc:6.2f} {cc:6.2f}")
    for (case, path, clock), v in sums.items():
        print(json.dumps({"bench": "python_vs_cpp", "case": case, "ranks": args.nproc, "path": path, "clock": clock,
                          "added_us": round(median([x[0] for x in v]), 3),
                          "added_best_us": round(min(x[1] for x in v), 3),
                          "python_vs_c_us": round(median([x[2] for x in v]), 3),
                          "c_vs_cpp_us": round(median([x[3] for x in v]), 3)}))


if __name__ == "__main__":
    main()
