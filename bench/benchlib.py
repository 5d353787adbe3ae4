"""What the benchmark drivers that run dtensor against PyTorch share (bench/train/run.py, bench/fsdp/run.py,
bench/checkpoint/run.py).

- the PyTorch virtual environment: its folder (DT_BENCH_VENV, else DT_BENCH_TRAIN_VENV, else BUILD_DIR/py-venv)
  and its making (python3 -m venv, pip install torch numpy from PyPI the first time: about 3 GB);
- running one program (a launcher line) with a deadline, reading the JSON lines it prints, and each run's step time:
  the median of rank 0's step_s after the warm-up steps;
- the environment a launcher starts from (no launcher variables inherited), torchrun's command line;
- alternating rounds (which side goes first alternates: shared machines drift) and medians over them;
- a plain text table and its cells.
Standard library only: the drivers run under /usr/bin/python3; PyTorch runs in the venv.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

RUN_TIMEOUT_S = 900
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def driver_parser(description, prefix, steps, cases, rounds=3):
    """The options every driver takes: BUILD_DIR, --torch-only, --rounds, --steps, --warmup, --cases (defaults from
    PREFIX_ROUNDS (rounds), PREFIX_STEPS (steps), PREFIX_WARMUP (3), PREFIX_CASES (all of cases)). Add the driver's
    own, then parse_driver_args."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("build", help="the Meson build folder")
    ap.add_argument("--torch-only", action="store_true", help="run only the PyTorch side")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get(f"{prefix}_ROUNDS", str(rounds))))
    ap.add_argument("--steps", type=int, default=int(os.environ.get(f"{prefix}_STEPS", str(steps))))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get(f"{prefix}_WARMUP", "3")))
    ap.add_argument("--cases", default=os.environ.get(f"{prefix}_CASES", ",".join(cases)),
                    help=f"comma-separated among {', '.join(cases)} (default all)")
    ap.set_defaults(_prefix=prefix, _all_cases=tuple(cases))
    return ap


def parse_driver_args(ap, argv):
    """Parses argv (model arguments after `--`, preceded by PREFIX_ARGS's); checks rounds, steps and cases. The result
    has .build (absolute), .cases (a list), .model_args and .torch_only (also PREFIX_TORCH_ONLY=1)."""
    model_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, model_args = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    a.build = os.path.abspath(a.build)
    a.model_args = shlex.split(os.environ.get(f"{a._prefix}_ARGS", "")) + model_args
    a.cases = [c for c in a.cases.split(",") if c]
    for c in a.cases:
        if c not in a._all_cases:
            ap.error(f"--cases takes {', '.join(a._all_cases)}, got {c!r}")
    if a.rounds < 1 or a.steps <= a.warmup:
        ap.error(f"need at least 1 round and more steps than warm-up steps, got {a.rounds} round(s), {a.steps} steps, "
                 f"{a.warmup} warm-up")
    a.torch_only = a.torch_only or os.environ.get(f"{a._prefix}_TORCH_ONLY", "0") == "1"
    return a


def venv_dir(build):
    """The PyTorch venv's folder: DT_BENCH_VENV, else DT_BENCH_TRAIN_VENV (its older name), else BUILD/py-venv (the one the tests use)."""
    return (os.environ.get("DT_BENCH_VENV") or os.environ.get("DT_BENCH_TRAIN_VENV") or
            os.path.join(build, "py-venv"))


def ensure_venv(venv, who="bench"):
    """The venv's python with torch and numpy importable; makes the venv and installs them the first time."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        log(f"{who}: making the virtual environment {venv}")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([python, "-c", "import torch, numpy"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        log(f"{who}: installing torch and numpy into {venv} (PyPI; about 3 GB the first time)")
        subprocess.run([python, "-m", "pip", "install", "--quiet", "torch", "numpy"], check=True)
    return python


def programs_built(build, targets, who):
    """Whether the build has the dtensor side's programs (targets relative to it, e.g. "bench/fsdp_mlp") and
    tools/dtrun; logs what is missing (and that only the PyTorch side runs) when not."""
    targets = list(targets) + ["tools/dtrun"]
    missing = [os.path.join(build, t) for t in targets if not os.access(os.path.join(build, t), os.X_OK)]
    if missing:
        log(f"{who}: {', '.join(missing)} missing (ninja -C {build} {' '.join(targets)}): running the PyTorch side "
            "only")
    return not missing


def launcher_env():
    """This process's environment without a launcher's variables (dtrun clears its ranks' own; torchrun must not
    inherit them)."""
    env = dict(os.environ)
    for k in LAUNCHER_VARS:
        env.pop(k, None)
    return env


def torchrun(python, nproc):
    """torchrun's command line for nproc local processes; the program follows (with --no-python: a full command)."""
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), "--no-python"]


def parse_rows(stdout):
    """The JSON objects among a program's output lines."""
    rows = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def step_rows(rows):
    """Rank 0's per-step rows ({"step", "step_s", ...})."""
    return [r for r in rows if "step" in r and "step_s" in r and r.get("rank", 0) == 0]


def median_step_s(steps, warmup):
    """The median step_s of the steps after the warm-up (all of them when there are no more)."""
    timed = [r["step_s"] for r in steps if r["step"] > warmup] or [r["step_s"] for r in steps]
    return statistics.median(timed)


def run(name, cmd, env, timeout=RUN_TIMEOUT_S):
    """Runs cmd; returns its stdout, or None (after logging why and its last output) when it failed."""
    log(f"   {name}: {' '.join(shlex.quote(c) for c in cmd)}")
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"   {name}: no result after {timeout} s")
        return None
    if p.returncode != 0:
        log(f"   {name}: failed (exit code {p.returncode}); its last output:")
        for line in (p.stdout + p.stderr).splitlines()[-15:]:
            log(f"     {line}")
        return None
    run.last_s = time.monotonic() - start
    return p.stdout


run.last_s = 0.0


def in_round_order(items, rnd):
    """items in order in odd rounds, reversed in even ones, so that no side always runs first."""
    return list(items) if rnd % 2 else list(reversed(items))


def run_rounds(plans, rounds, who):
    """Runs every side of every case once per round, the sides of a case in in_round_order. plans: [(case key,
    [(impl, make_cmd)])], make_cmd() giving the command line. Returns ({(case key, impl): [(round, the JSON rows the
    run printed)]}, the number of failed runs). Each run starts from launcher_env()."""
    results, failed = {}, 0
    for rnd in range(1, rounds + 1):
        log(f"== {who} round {rnd}/{rounds}")
        for key, sides in plans:
            for impl, make_cmd in in_round_order(sides, rnd):
                out = run(f"{key} {impl}", make_cmd(), launcher_env())
                rows = parse_rows(out) if out is not None else []
                if not rows:
                    if out is not None:
                        log(f"   {key} {impl}: printed no JSON lines")
                    failed += 1
                    continue
                log(f"   {key} {impl}: {run.last_s:.1f} s")
                results.setdefault((key, impl), []).append((rnd, rows))
    return results, failed


def fmt(v, spec, suffix=""):
    """v formatted by spec with a suffix, or None (a table's '-') when v is None."""
    return None if v is None else f"{v:{spec}}{suffix}"


def report(who, headers, rows, met, total, failed, notes=()):
    """Logs the table, the notes, how many targets were met and how many runs failed; returns the exit code (1 when a
    run failed)."""
    for line in format_table(headers, rows) + list(notes):
        log(line)
    if total:
        log(f"targets met: {met} of {total}")
    if failed:
        log(f"{who}: {failed} run(s) failed (above)")
    return 1 if failed else 0


def format_table(headers, rows):
    """Lines of a text table: the first column left-aligned, the others right-aligned; None prints as '-'."""
    cells = [[("-" if c is None else str(c)) for c in r] for r in [headers] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return [" ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)) for r in cells]
